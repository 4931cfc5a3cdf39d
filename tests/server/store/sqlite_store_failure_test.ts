/**
 * SqliteStore when commits fail or the disk refuses: pending appends rejected with
 * STORE_UNAVAILABLE, retries, a full tmpfs, a read-only directory, and stores it must not open.
 */
import { Database } from "bun:sqlite";
import { expect, it } from "bun:test";
import { spawnSync } from "node:child_process";
import { chmodSync, rmSync } from "node:fs";
import { join } from "node:path";
import { KittenError } from "../../../src/protocol/errors.ts";
import { memoryLogger } from "../../../src/server/log.ts";
import { STORE_FILE } from "../../../src/server/store/record.ts";
import { SqliteStore } from "../../../src/server/store/sqlite_store.ts";
import { STORE_VERSION } from "../../../src/version.ts";
import { waitFor } from "../../helpers/broker.ts";
import { fields, storedMessage } from "./store_conformance.ts";
import { sqliteStoreFixture, storeRejection as rejection } from "../../helpers/sqlite_store.ts";

const { temps, withStore, snapshot } = sqliteStoreFixture();

it("SqliteStore rejects the pending appends with STORE_UNAVAILABLE when a commit fails, and recovers", async () => {
  let failing = false;
  const logger = memoryLogger();
  const beforeCommit = () => {
    if (failing) throw Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });
  };
  // The database's commits (a journal's failures: sqlite_journal_test.ts).
  await withStore({ mode: "fsync", beforeCommit, logger, retryIntervalMs: 5, journal: false }, async (store, directory) => {
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
  expect(result.failure?.message).toMatch(/^Cannot write to the store in .*: (SQLITE_(FULL|IOERR)|ENOSPC)/);
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
