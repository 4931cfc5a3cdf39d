import { Database } from "bun:sqlite";
import { afterAll, expect, it } from "bun:test";
import { spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { KittenError } from "../../../src/protocol/errors.ts";
import { memoryLogger } from "../../../src/server/log.ts";
import { META, migrate, SCHEMA, STORE_FILE } from "../../../src/server/store/record.ts";
import { MAX_DELETES_PER_COMMIT, SqliteStore, type SqliteStoreOptions } from "../../../src/server/store/sqlite_store.ts";
import type { Store, StoredMessage } from "../../../src/server/store/store.ts";
import { STORE_VERSION } from "../../../src/version.ts";
import { waitFor } from "../../helpers/broker.ts";
import { TempDirs } from "../../helpers/temp_dir.ts";
import { delivery, fields, runStoreConformance, storedMessage } from "./store_conformance.ts";

// Each test removes its folders when done; afterAll catches any that a failure left behind.
const temps = new TempDirs("kitten-store-");
afterAll(temps.removeAll);

/** A store in a fresh temp directory; `reopen` closes it and opens the directory again. */
function sqliteSubject(mode: "fsync" | "batch") {
  return async () => {
    const directory = temps.make();
    const open = () => new SqliteStore({ directory, mode, commitIntervalMs: 2, logger: memoryLogger() });
    let current: Store = open();
    const store = current as SqliteStore;
    return {
      store,
      updates: () => store.stats.updates, // The first store's: reopened ones start again at 0.
      reopen: async () => {
        await current.close();
        current = open();
        return current;
      },
      cleanup: async () => {
        await current.close();
        rmSync(directory, { recursive: true, force: true });
      },
    };
  };
}

runStoreConformance("SqliteStore (fsync)", sqliteSubject("fsync"), { durable: true });
runStoreConformance("SqliteStore (batch)", sqliteSubject("batch"), { durable: true });

/** Runs `body` with a store in a temp directory, then closes it and deletes the directory. */
async function withStore(
  options: Partial<SqliteStoreOptions>,
  body: (store: SqliteStore, directory: string) => Promise<void>,
): Promise<void> {
  const directory = temps.make();
  const store = new SqliteStore({ directory, logger: memoryLogger(), ...options });
  try {
    await body(store, directory);
  } finally {
    store.close();
    rmSync(directory, { recursive: true, force: true });
  }
}

/** Opens a copy of the database files: what a crash at this instant would leave on disk (ids). */
function snapshot(directory: string): string[] {
  return snapshotMessages(directory).map((message) => message.id);
}

/** Like `snapshot`, the loaded messages. */
function snapshotMessages(directory: string): StoredMessage[] {
  const copy = temps.make();
  try {
    for (const suffix of ["", "-wal"]) {
      const file = join(directory, STORE_FILE + suffix);
      if (existsSync(file)) copyFileSync(file, join(copy, STORE_FILE + suffix));
    }
    const store = new SqliteStore({ directory: copy, logger: memoryLogger() });
    const messages = store.load();
    store.close();
    return messages;
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
}

// Kept over broker.ts rejection: it also asserts a KittenError, and accepts append()'s `void | Promise` result.
async function rejection(promise: unknown): Promise<KittenError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(KittenError);
    return error as KittenError;
  }
  throw new Error("expected a rejection");
}

it("SqliteStore.append() in fsync mode shares one commit among 1000 appends of one tick", async () => {
  await withStore({ mode: "fsync" }, async (store, directory) => {
    const messages = Array.from({ length: 1000 }, (_, n) => storedMessage(n));
    const results = messages.map((message) => store.append(message));
    expect(results.every((result) => result instanceof Promise)).toBe(true);
    expect(store.commits).toBe(0);
    await Promise.all(results);
    expect(store.commits).toBe(1);
    expect(store.stats.inserted).toBe(1000);
    expect(store.stats.largestBatch).toBe(1000);
    expect(store.stats.lastCommitMs).toBeGreaterThan(0);
    expect(snapshot(directory).length).toBe(1000);
  });
});

it("SqliteStore.append() in fsync mode resolves only once the commit holding the message is done", async () => {
  await withStore({ mode: "fsync" }, async (store, directory) => {
    let confirmed = false;
    const stored = Promise.resolve(store.append(storedMessage(1))).then(() => {
      confirmed = true;
      expect(snapshot(directory)).toEqual([storedMessage(1).id]);
    });
    await Promise.resolve();
    expect(confirmed).toBe(false);
    expect(snapshot(directory)).toEqual([]);
    await stored;
    expect(confirmed).toBe(true);
    // Appends of a later tick go to the next commit.
    await store.append(storedMessage(2));
    expect(store.commits).toBe(2);
  });
});

it("SqliteStore.remove() in fsync mode waits for commitIntervalMs or rides with the next appends", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 50 }, async (store, directory) => {
    const [a, b, c] = [1, 2, 3].map((n) => storedMessage(n));
    await Promise.all([store.append(a!), store.append(b!)]);
    store.remove(a!);
    await store.append(c!); // One commit: the insert of c and the delete of a.
    expect(store.commits).toBe(2);
    expect(snapshot(directory)).toEqual([b!.id, c!.id]);
    store.remove(b!);
    await new Promise((resolve) => setImmediate(resolve)); // An append would have been committed by now.
    expect(store.commits).toBe(2);
    await waitFor(() => store.commits === 3);
    expect(snapshot(directory)).toEqual([c!.id]);
  });
});

it("SqliteStore.remove() of an append still pending cancels both: nothing reaches the disk", async () => {
  await withStore({ mode: "fsync" }, async (store) => {
    const message = storedMessage(1);
    const stored = store.append(message);
    store.remove(message);
    await stored;
    expect(store.commits).toBe(0);
    expect(store.stats.cancelled).toBe(1);
    expect(store.stats.inserted + store.stats.deleted).toBe(0);
    expect(store.load()).toEqual([]);
  });
});

it("SqliteStore.remove() of a large backlog at once is split into commits of MAX_DELETES_PER_COMMIT", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 1 }, async (store, directory) => {
    const messages = Array.from({ length: 2.5 * MAX_DELETES_PER_COMMIT }, (_, n) => storedMessage(n));
    await Promise.all(messages.map((message) => store.append(message)));
    expect(store.commits).toBe(1);
    for (const message of messages.slice(1)) store.remove(message);
    await waitFor(() => store.pending === 0);
    expect(store.commits).toBe(4);
    expect(store.stats.largestBatch).toBe(messages.length);
    expect(store.stats.deleted).toBe(messages.length - 1);
    expect(snapshot(directory)).toEqual([messages[0]!.id]);
    // load() and close() commit every pending delete before they return.
    for (const message of messages.slice(0, 1)) store.remove(message);
    expect(store.load()).toEqual([]);
  });
});

/** Delivery counts as a crash at this instant would leave them, by id. */
function countsOnDisk(directory: string): Record<string, number> {
  return Object.fromEntries(snapshotMessages(directory).map((message) => [message.id, message.deliveries!]));
}

it("SqliteStore.noteDelivery() takes no commit of its own: it waits for commitIntervalMs or rides with the next appends", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 50 }, async (store, directory) => {
    const [a, b, c] = [1, 2, 3].map((n) => storedMessage(n));
    await Promise.all([store.append(a!), store.append(b!)]);
    expect(store.commits).toBe(1);
    store.noteDelivery(a!, 1);
    store.noteDelivery(a!, 2); // Coalesced: one UPDATE with the highest count.
    store.noteDelivery(b!, 1);
    expect(store.pending).toBe(2);
    await store.append(c!); // One commit: the insert of c and the updates of a and b.
    expect(store.commits).toBe(2);
    expect(store.stats.updates).toBe(2);
    expect(store.stats.largestBatch).toBe(3);
    expect(countsOnDisk(directory)).toEqual({ [a!.id]: 2, [b!.id]: 1, [c!.id]: 0 });
    store.noteDelivery(c!, 1);
    await new Promise((resolve) => setImmediate(resolve)); // An append would have been committed by now.
    expect(store.commits).toBe(2);
    await waitFor(() => store.commits === 3);
    expect(store.stats.updates).toBe(3);
    expect(store.pending).toBe(0);
    expect(countsOnDisk(directory)).toEqual({ [a!.id]: 2, [b!.id]: 1, [c!.id]: 1 });
  });
});

it("SqliteStore.noteDelivery() followed by remove() before the commit writes no UPDATE (the usual ack)", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 5 }, async (store, directory) => {
    const messages = Array.from({ length: 100 }, (_, n) => storedMessage(n));
    await Promise.all(messages.map((message) => store.append(message)));
    for (const message of messages) store.noteDelivery(message, 1);
    for (const message of messages.slice(0, 99)) store.remove(message);
    expect(store.pending).toBe(100); // 99 deletes and the count of the one not acked.
    await waitFor(() => store.pending === 0);
    expect(store.commits).toBe(2);
    expect(store.stats.deleted).toBe(99);
    expect(store.stats.updates).toBe(1);
    expect(countsOnDisk(directory)).toEqual({ [messages[99]!.id]: 1 });
  });
});

it("SqliteStore.noteDelivery() of a pending append is written by its INSERT, in fsync and batch mode", async () => {
  for (const mode of ["fsync", "batch"] as const) {
    await withStore({ mode, commitIntervalMs: 2 }, async (store, directory) => {
      const message = storedMessage(1, { deliveries: 2 }); // A count given to append: kept if higher.
      const other = storedMessage(2, { deliveries: 6 });
      const stored = [store.append(message), store.append(other)];
      store.noteDelivery(message, 3);
      store.noteDelivery(other, 4);
      await Promise.all(stored);
      await waitFor(() => store.pending === 0);
      expect(store.commits).toBe(1);
      expect(store.stats.inserted).toBe(2);
      expect(store.stats.updates).toBe(0);
      expect(countsOnDisk(directory)).toEqual({ [message.id]: 3, [other.id]: 6 });
    });
  }
});

it("SqliteStore keeps pending delivery counts when a commit fails and writes them with the retry", async () => {
  let failing = false;
  const beforeCommit = () => {
    if (failing) throw Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });
  };
  await withStore({ mode: "fsync", commitIntervalMs: 2, retryIntervalMs: 5, beforeCommit }, async (store, directory) => {
    const [a, b] = [1, 2].map((n) => storedMessage(n));
    await Promise.all([store.append(a!), store.append(b!)]);
    failing = true;
    store.noteDelivery(a!, 1);
    store.noteDelivery(b!, 2);
    await waitFor(() => store.stats.failedCommits >= 2);
    expect(store.healthy).toBe(false);
    expect(store.pending).toBe(2);
    store.noteDelivery(a!, 3); // Noted meanwhile: the highest is written.
    store.remove(b!); // Acked meanwhile: its count is dropped, its delete retried.
    failing = false;
    await waitFor(() => store.healthy && store.pending === 0);
    expect(store.stats.updates).toBe(1);
    expect(countsOnDisk(directory)).toEqual({ [a!.id]: 3 });
  });
});

it("SqliteStore splits delivery counts beyond MAX_DELETES_PER_COMMIT into several commits", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 1 }, async (store, directory) => {
    const messages = Array.from({ length: 1.5 * MAX_DELETES_PER_COMMIT }, (_, n) => storedMessage(n));
    await Promise.all(messages.map((message) => store.append(message)));
    for (const message of messages.slice(0, 10)) store.remove(message);
    for (const [n, message] of messages.entries()) store.noteDelivery(message, 1 + (n % 4));
    await waitFor(() => store.pending === 0);
    expect(store.commits).toBe(3);
    expect(store.stats.largestBatch).toBe(messages.length);
    expect(store.stats.deleted).toBe(10);
    expect(store.stats.updates).toBe(messages.length - 10);
    const loaded = snapshotMessages(directory);
    expect(loaded.length).toBe(messages.length - 10);
    expect(loaded.every((message, i) => message.deliveries === 1 + ((i + 10) % 4))).toBe(true);
  });
});

it("SqliteStore.noteDelivery() after close() is ignored, and close() writes the counts noted before", async () => {
  const directory = temps.make();
  try {
    const store = new SqliteStore({ directory, commitIntervalMs: 1000, logger: memoryLogger() });
    const message = storedMessage(1);
    await store.append(message);
    store.noteDelivery(message, 2);
    store.close();
    store.noteDelivery(message, 5);
    expect(store.pending).toBe(0);
    const reopened = new SqliteStore({ directory, logger: memoryLogger() });
    expect(reopened.load().map(delivery)).toEqual([{ id: message.id, deliveries: 2, deadLetter: null }]);
    reopened.close();
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

it("SqliteStore.append() in batch mode returns undefined and commits within commitIntervalMs", async () => {
  await withStore({ mode: "batch", commitIntervalMs: 10 }, async (store, directory) => {
    const started = performance.now();
    for (let n = 0; n < 100; n++) expect(store.append(storedMessage(n))).toBeUndefined();
    expect(store.commits).toBe(0);
    await waitFor(() => store.commits > 0);
    expect(performance.now() - started).toBeGreaterThanOrEqual(9);
    expect(store.commits).toBe(1);
    expect(snapshot(directory).length).toBe(100);
  });
});

it("SqliteStore rejects the pending appends with STORE_UNAVAILABLE when a commit fails, and recovers", async () => {
  let failing = false;
  const logger = memoryLogger();
  const beforeCommit = () => {
    if (failing) throw Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });
  };
  await withStore({ mode: "fsync", beforeCommit, logger, retryIntervalMs: 5 }, async (store, directory) => {
    const [acked, refused, later] = [1, 2, 3].map((n) => storedMessage(n));
    await store.append(acked!);
    failing = true;
    store.remove(acked!);
    const error = await rejection(Promise.all([store.append(refused!), store.append(storedMessage(4))]));
    expect(error.code).toBe("STORE_UNAVAILABLE");
    expect(error.message).toContain(directory);
    expect(error.message).toContain("SQLITE_FULL: database or disk is full");
    expect(store.healthy).toBe(false);
    expect(store.stats.failedCommits).toBe(1);
    expect(logger.lines.filter((line) => line.includes("commit failed")).length).toBe(1);
    // Still failing: the pending remove is retried, fails again, is logged once.
    await waitFor(() => store.stats.failedCommits >= 3);
    expect(logger.lines.filter((line) => line.includes("commit failed")).length).toBe(1);
    // The disk recovers: the next commit carries the retried remove; the refused message is gone.
    failing = false;
    await store.append(later!);
    expect(store.healthy).toBe(true);
    expect(logger.lines.some((line) => line.includes("store writable again"))).toBe(true);
    expect(store.load().map(fields)).toEqual([fields(later!)]);
    store.remove(refused!); // Never stored: nothing to do.
    expect(store.pending).toBe(0);
  });
});

it("SqliteStore in batch mode refuses appends while commits fail and retries the confirmed ones", async () => {
  let failing = false;
  const beforeCommit = () => {
    if (failing) throw Object.assign(new Error("attempt to write a readonly database"), { code: "SQLITE_READONLY" });
  };
  await withStore({ mode: "batch", commitIntervalMs: 2, retryIntervalMs: 5, beforeCommit }, async (store, directory) => {
    const confirmed = storedMessage(1);
    failing = true;
    expect(store.append(confirmed)).toBeUndefined();
    await waitFor(() => !store.healthy);
    let refusal: unknown;
    try {
      store.append(storedMessage(2));
    } catch (error) {
      refusal = error;
    }
    expect(refusal).toBeInstanceOf(KittenError);
    expect((refusal as KittenError).code).toBe("STORE_UNAVAILABLE");
    expect((refusal as KittenError).message).toContain(directory);
    expect((refusal as KittenError).message).toContain("SQLITE_READONLY");
    await waitFor(() => store.stats.failedCommits >= 2);
    failing = false;
    await waitFor(() => store.healthy);
    expect(snapshot(directory)).toEqual([confirmed.id]);
  });
});

it("SqliteStore.close() in fsync mode rejects pending appends when the last commit fails", async () => {
  const directory = temps.make();
  try {
    const store = new SqliteStore({
      directory,
      logger: memoryLogger(),
      beforeCommit: () => {
        throw new Error("I/O error");
      },
    });
    const stored = store.append(storedMessage(1));
    store.close();
    expect((await rejection(stored)).code).toBe("STORE_UNAVAILABLE");
    expect(() => store.append(storedMessage(2))).toThrow(/closed/);
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

// Real disk failures need a filesystem we can fill or make read-only. A private mount namespace
// (`unshare --user --map-root-user --mount`) mounts a tmpfs without privileges where user
// namespaces are allowed; elsewhere these tests are skipped.
const bun = process.execPath;
const fullChild = join(import.meta.dir, "../../helpers/store_full_child.ts");
const canMountTmpfs = (() => {
  const directory = temps.make();
  try {
    const probe = spawnSync("unshare", ["--user", "--map-root-user", "--mount", "sh", "-c", 'mount -t tmpfs -o size=64k tmpfs "$1"', "sh", directory]);
    return probe.status === 0;
  } catch {
    return false;
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
})();

function inTmpfs(scenario: string, size: string): Record<string, unknown> {
  const mount = temps.make();
  try {
    const child = spawnSync(
      "unshare",
      ["--user", "--map-root-user", "--mount", "sh", "-c", `mount -t tmpfs -o size=${size} tmpfs "$1" && exec "$2" "$3" "$4" "$1"`, "sh", mount, bun, fullChild, scenario],
      { encoding: "utf8", timeout: 10_000 },
    );
    if (child.status !== 0) throw new Error(`child failed (${child.status}): ${child.stderr}`);
    return JSON.parse(child.stdout);
  } finally {
    rmSync(mount, { recursive: true, force: true });
  }
}

it.skipIf(!canMountTmpfs)("SqliteStore on a full tmpfs refuses appends with STORE_UNAVAILABLE and recovers when space is freed", () => {
  const result = inTmpfs("full", "2m") as {
    confirmed: string[];
    failure: { code: string; message: string } | null;
    refusedAgain: { code: string; message: string } | null;
    healthyAfterFailure: boolean;
    healthyAfterRecovery: boolean;
    loaded: string[];
    reloaded: string[];
  };
  expect(result.failure?.code).toBe("STORE_UNAVAILABLE");
  expect(result.failure?.message).toMatch(/^Cannot write to the store in .*: SQLITE_(FULL|IOERR)/);
  expect(result.refusedAgain?.code).toBe("STORE_UNAVAILABLE");
  expect(result.healthyAfterFailure).toBe(false);
  expect(result.healthyAfterRecovery).toBe(true);
  expect(result.confirmed.length).toBeGreaterThan(10);
  // Exactly the confirmed messages: none lost, none of the refused ones stored.
  expect(result.loaded).toEqual(result.confirmed);
  expect(result.reloaded).toEqual(result.confirmed);
});

it("SqliteStore refuses to open a read-only data directory with STORE_UNAVAILABLE", () => {
  if (process.getuid?.() !== 0) {
    const directory = temps.make();
    const store = new SqliteStore({ directory, logger: memoryLogger() });
    store.close();
    chmodSync(directory, 0o555);
    try {
      expect(() => new SqliteStore({ directory, logger: memoryLogger() })).toThrow(/Cannot open the store in/);
    } finally {
      chmodSync(directory, 0o755);
      rmSync(directory, { recursive: true, force: true });
    }
    return;
  }
  // Root writes through chmod: use a tmpfs remounted read-only instead, when possible.
  if (!canMountTmpfs) return;
  const result = inTmpfs("readonly", "1m") as { opened?: { code: string; message: string }; skipped?: string };
  if (result.skipped) return;
  expect(result.opened?.code).toBe("STORE_UNAVAILABLE");
  expect(result.opened?.message).toMatch(/Cannot open the store in ".*\/data": SQLITE_/);
});

it("SqliteStore refuses a second store on the same directory (another broker)", async () => {
  await withStore({}, async (_store, directory) => {
    expect(() => new SqliteStore({ directory, logger: memoryLogger() })).toThrow(/another process \(a broker\?\) has it open: SQLITE_BUSY: database is locked/);
  });
});

it("SqliteStore refuses a store written by a newer store version", () => {
  const directory = temps.make();
  try {
    new SqliteStore({ directory, logger: memoryLogger() }).close();
    const db = new Database(join(directory, STORE_FILE));
    db.run("UPDATE meta SET value = 99 WHERE key = 'store_version'");
    db.close();
    let refusal: unknown;
    try {
      new SqliteStore({ directory, logger: memoryLogger() });
    } catch (error) {
      refusal = error;
    }
    expect(refusal).toBeInstanceOf(KittenError);
    expect((refusal as KittenError).code).toBe("STORE_UNAVAILABLE");
    expect((refusal as KittenError).message).toBe(
      `Cannot open the store in "${directory}": it was written by store version 99, and this Kitten-MQ reads versions up to ${STORE_VERSION}. ` +
        "Run a newer Kitten-MQ, or point dataDirectory at another directory",
    );
    // Refused means untouched.
    const after = new Database(join(directory, STORE_FILE), { readonly: true });
    expect(after.query("SELECT value FROM meta WHERE key = 'store_version'").get()).toEqual({ value: 99 });
    after.close();
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

it("SqliteStore refuses a database that is not a Kitten-MQ store", () => {
  const directory = temps.make();
  try {
    const db = new Database(join(directory, STORE_FILE));
    db.run("CREATE TABLE something (x)");
    db.close();
    expect(() => new SqliteStore({ directory, logger: memoryLogger() })).toThrow(/is not a Kitten-MQ store/);
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

const fixtureV1 = readFileSync(join(import.meta.dir, "fixtures/store_v1.sql"), "utf8");

it("SqliteStore reads the checked-in store v1 fixture (upgrade/readback)", async () => {
  const directory = temps.make();
  try {
    const db = new Database(join(directory, STORE_FILE));
    db.run(fixtureV1);
    db.close();
    const logger = memoryLogger();
    const store = new SqliteStore({ directory, logger });
    expect(logger.lines).toContain(`[info ] [store    ] directory=${directory};from=1;to=${STORE_VERSION};store upgraded`);
    const loaded = store.load();
    // Upgraded in place: v1 kept no delivery counts nor dead letters.
    expect(loaded.map(delivery)).toEqual(["k1a2.0", "k1a2.1", "k1a2.4", "k1a2.4~9"].map((id) => ({ id, deliveries: 0, deadLetter: null })));
    expect(loaded.map(fields)).toEqual([
      { id: "k1a2.0", queue: "orders/v1", destination: "shop-1", created: 1767225601000, body: Uint8Array.from(Buffer.from("a2626964016474657874657061706572", "hex")) },
      { id: "k1a2.1", queue: "orders/v1", destination: "*", created: 1767225602000, body: new TextEncoder().encode('{"id":2}') },
      { id: "k1a2.4", queue: "mails/v2", destination: "ops", created: 1767225605000, body: new Uint8Array(0) },
      { id: "k1a2.4~9", queue: "dead/v1", destination: "shop-1", created: 1767225606000, body: Uint8Array.from({ length: 16 }, (_, i) => i) },
    ]);
    expect(store.meta(META.STORE_VERSION)).toBe(STORE_VERSION);
    expect(store.meta(META.EPOCH)).toBe(7);
    // New messages go after the old ones; loaded ones can be removed and counted.
    store.remove(loaded[1]!);
    store.noteDelivery(loaded[2]!, 2);
    await store.append(storedMessage(1));
    store.close();
    const reopened = new SqliteStore({ directory, logger: memoryLogger() });
    expect(reopened.load().map(delivery)).toEqual([
      { id: "k1a2.0", deliveries: 0, deadLetter: null },
      { id: "k1a2.4", deliveries: 2, deadLetter: null },
      { id: "k1a2.4~9", deliveries: 0, deadLetter: null },
      { id: storedMessage(1).id, deliveries: 0, deadLetter: null },
    ]);
    reopened.close();
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

const fixtureV2 = readFileSync(join(import.meta.dir, "fixtures/store_v2.sql"), "utf8");

it("SqliteStore reads the checked-in store v2 fixture (delivery counts and dead letters)", async () => {
  const directory = temps.make();
  try {
    const db = new Database(join(directory, STORE_FILE));
    db.run(fixtureV2);
    db.close();
    const store = new SqliteStore({ directory, logger: memoryLogger() });
    const loaded = store.load();
    const hex = (text: string) => Uint8Array.from(Buffer.from(text, "hex"));
    expect(loaded.map(fields)).toEqual([
      { id: "k2b7.0", queue: "orders/v1", destination: "shop-1", created: 1769904001000, body: hex("a2626964016474657874657061706572") },
      { id: "k2b7.1", queue: "orders/v1", destination: "*", created: 1769904002000, body: new TextEncoder().encode('{"id":2}') },
      { id: "k2b7.3", queue: "mails/v2", destination: "ops", created: 1769904004000, body: new Uint8Array(0) },
      { id: "k2b7.1~9", queue: "dead/v1", destination: "shop-2", created: 1769904007000, body: new TextEncoder().encode('{"id":2}') },
      { id: "k2b7.6~10", queue: "dead/v1", destination: "*", created: 1769904008000, body: Uint8Array.from({ length: 16 }, (_, i) => i) },
    ]);
    expect(loaded.map(delivery)).toEqual([
      { id: "k2b7.0", deliveries: 0, deadLetter: null },
      { id: "k2b7.1", deliveries: 3, deadLetter: null },
      { id: "k2b7.3", deliveries: 1, deadLetter: null },
      { id: "k2b7.1~9", deliveries: 0, deadLetter: { reason: "requeueLimit", channel: "orders/v1/shop-2", messageId: "k2b7.1", deliveries: 5 } },
      { id: "k2b7.6~10", deliveries: 2, deadLetter: { reason: "ttl", channel: "orders/v1/*", messageId: "k2b7.6", deliveries: 0 } },
    ]);
    expect(store.meta(META.STORE_VERSION)).toBe(STORE_VERSION);
    expect(store.meta(META.EPOCH)).toBe(3);
    // Counts continue, new messages go after the old ones, loaded ones can be removed.
    store.noteDelivery(loaded[1]!, 4);
    store.remove(loaded[3]!);
    await store.append(storedMessage(1));
    store.close();
    const reopened = new SqliteStore({ directory, logger: memoryLogger() });
    expect(reopened.load().map((message) => [message.id, message.deliveries])).toEqual([
      ["k2b7.0", 0],
      ["k2b7.1", 4],
      ["k2b7.3", 1],
      ["k2b7.6~10", 2],
      [storedMessage(1).id, 0],
    ]);
    reopened.close();
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

it("every store fixture, once opened, has the schema of a fresh store (UPGRADES match SCHEMA)", () => {
  const shape = (db: Database) =>
    ["meta", "messages"].map((table) => db.query(`SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info('${table}') ORDER BY cid`).all());
  const fresh = new Database(":memory:");
  for (const statement of SCHEMA) fresh.run(statement);
  expect((shape(fresh)[1] as { name: string }[]).map((column) => column.name)).toEqual([
    "seq",
    "id",
    "queue",
    "destination",
    "created",
    "body",
    "deliveries",
    "dead_letter",
  ]);
  for (const [version, fixture] of [[1, fixtureV1], [2, fixtureV2]] as const) {
    const db = new Database(":memory:");
    db.run(fixture);
    expect(migrate(db, { directory: "/fixture" })).toBe(version);
    expect(shape(db)).toEqual(shape(fresh));
    expect(db.query("SELECT value FROM meta WHERE key = 'store_version'").get()).toEqual({ value: STORE_VERSION });
    db.close();
  }
  fresh.close();
});

it("migrate() runs each upgrade step in order and records the new version, in one transaction", () => {
  const db = new Database(":memory:");
  db.run(fixtureV1);
  const steps: number[] = [];
  const upgrades = {
    1: (db: Database) => {
      steps.push(1);
      db.run("ALTER TABLE messages ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 0");
    },
    2: () => {
      steps.push(2);
    },
  };
  expect(migrate(db, { directory: "/fixture", target: 3, upgrades })).toBe(1);
  expect(steps).toEqual([1, 2]);
  expect(db.query("SELECT value FROM meta WHERE key = 'store_version'").get()).toEqual({ value: 3 });
  expect(db.query("SELECT id, deliveries FROM messages ORDER BY seq LIMIT 1").get()).toEqual({ id: "k1a2.0", deliveries: 0 });
  db.close();

  // A missing step refuses the store and leaves it as it was.
  const old = new Database(":memory:");
  old.run(fixtureV1);
  expect(() => migrate(old, { directory: "/fixture", target: 3, upgrades: { 1: upgrades[1] } })).toThrow(
    'Cannot open the store in "/fixture": no upgrade from store version 2 to 3',
  );
  expect(old.query("SELECT value FROM meta WHERE key = 'store_version'").get()).toEqual({ value: 1 });
  expect(old.query("SELECT count(*) AS n FROM pragma_table_info('messages') WHERE name = 'deliveries'").get()).toEqual({ n: 0 });
  old.close();
});

it("SqliteStore.setMeta() writes a value that survives reopening (cluster epoch)", () => {
  const directory = temps.make();
  try {
    const store = new SqliteStore({ directory, logger: memoryLogger() });
    expect(store.meta(META.EPOCH)).toBe(0);
    expect(store.meta("missing")).toBeNull();
    store.setMeta(META.EPOCH, 12);
    store.close();
    expect(() => store.meta(META.EPOCH)).toThrow(/closed/);
    const reopened = new SqliteStore({ directory, logger: memoryLogger() });
    expect(reopened.meta(META.EPOCH)).toBe(12);
    reopened.close();
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

it("SqliteStore creates a missing data directory and logs where it opened", () => {
  const parent = temps.make();
  try {
    const logger = memoryLogger();
    const directory = join(parent, "a", "b");
    const store = new SqliteStore({ directory, mode: "batch", logger });
    expect(existsSync(join(directory, STORE_FILE))).toBe(true);
    expect(logger.lines).toEqual([`[info ] [store    ] directory=${directory};mode=batch;version=${STORE_VERSION};store opened`]);
    store.close();
  } finally {
    rmSync(parent, { recursive: true, force: true });
  }
});
