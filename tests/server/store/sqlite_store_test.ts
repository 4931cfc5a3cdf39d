/**
 * SqliteStore: the store conformance suite in fsync and batch mode, and how appends, removals and
 * delivery counts share commits. Failures and versions have files of their own.
 */
import { expect, it } from "bun:test";
import { rmSync } from "node:fs";
import { memoryLogger } from "../../../src/server/log.ts";
import { MAX_DELETES_PER_COMMIT, SqliteStore } from "../../../src/server/store/sqlite_store.ts";
import type { Store } from "../../../src/server/store/store.ts";
import { waitFor } from "../../helpers/broker.ts";
import { delivery, runStoreConformance, storedMessage } from "./store_conformance.ts";
import { sqliteStoreFixture } from "../../helpers/sqlite_store.ts";

// The database's transactions, counted exactly: appends go to the database, not the journal
// (journal.ts; its own tests are in sqlite_journal_test.ts).
const { temps, withStore, snapshot, snapshotMessages } = sqliteStoreFixture({ journal: false });

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
      committed: () => waitFor(() => (current as SqliteStore).pending === 0, 2000, "nothing waits for a commit"),
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

it("SqliteStore.append() in fsync mode shares one commit among 1000 appends of one tick", async () => {
  await withStore({ mode: "fsync" }, async (store, directory) => {
    const messages = Array.from({ length: 1000 }, (_, n) => storedMessage(n));
    const results = messages.map((message) => store.append(message));
    expect(results.every((result) => result instanceof Promise)).toBe(true);
    expect(store.stats.commits).toBe(0);
    await Promise.all(results);
    expect(store.stats.commits).toBe(1);
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
    expect(store.stats.commits).toBe(2);
  });
});

it("SqliteStore.remove() in fsync mode waits for commitIntervalMs or rides with the next appends", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 50 }, async (store, directory) => {
    const [a, b, c] = [1, 2, 3].map((n) => storedMessage(n));
    await Promise.all([store.append(a!), store.append(b!)]);
    store.remove(a!);
    await store.append(c!); // One commit: the insert of c and the delete of a.
    expect(store.stats.commits).toBe(2);
    expect(snapshot(directory)).toEqual([b!.id, c!.id]);
    store.remove(b!);
    await new Promise((resolve) => setImmediate(resolve)); // An append would have been committed by now.
    expect(store.stats.commits).toBe(2);
    await waitFor(() => store.stats.commits === 3);
    expect(snapshot(directory)).toEqual([c!.id]);
  });
});

it("SqliteStore.remove() of an append still pending cancels both: nothing reaches the disk", async () => {
  await withStore({ mode: "fsync" }, async (store) => {
    const message = storedMessage(1);
    const stored = store.append(message);
    store.remove(message);
    await stored;
    expect(store.stats.commits).toBe(0);
    expect(store.stats.cancelled).toBe(1);
    expect(store.stats.inserted + store.stats.deleted).toBe(0);
    expect(store.load()).toEqual([]);
  });
});

it("SqliteStore.remove() of a large backlog at once is split into commits of MAX_DELETES_PER_COMMIT", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 1 }, async (store, directory) => {
    const messages = Array.from({ length: 2.5 * MAX_DELETES_PER_COMMIT }, (_, n) => storedMessage(n));
    await Promise.all(messages.map((message) => store.append(message)));
    expect(store.stats.commits).toBe(1);
    for (const message of messages.slice(1)) store.remove(message);
    await waitFor(() => store.pending === 0);
    expect(store.stats.commits).toBe(4);
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
    expect(store.stats.commits).toBe(1);
    store.noteDelivery(a!, 1);
    store.noteDelivery(a!, 2); // Coalesced: one UPDATE with the highest count.
    store.noteDelivery(b!, 1);
    expect(store.pending).toBe(2);
    await store.append(c!); // One commit: the insert of c and the updates of a and b.
    expect(store.stats.commits).toBe(2);
    expect(store.stats.updates).toBe(2);
    expect(store.stats.largestBatch).toBe(3);
    expect(countsOnDisk(directory)).toEqual({ [a!.id]: 2, [b!.id]: 1, [c!.id]: 0 });
    store.noteDelivery(c!, 1);
    await new Promise((resolve) => setImmediate(resolve)); // An append would have been committed by now.
    expect(store.stats.commits).toBe(2);
    await waitFor(() => store.stats.commits === 3);
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
    expect(store.stats.commits).toBe(2);
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
      expect(store.stats.commits).toBe(1);
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
    expect(store.stats.commits).toBe(3);
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
    expect(store.stats.commits).toBe(0);
    await waitFor(() => store.stats.commits > 0);
    expect(performance.now() - started).toBeGreaterThanOrEqual(9);
    expect(store.stats.commits).toBe(1);
    expect(snapshot(directory).length).toBe(100);
  });
});
