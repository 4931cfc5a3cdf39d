/**
 * SqliteStore's delayed requeues (`noteDelay`): when they are written, what a failed commit
 * leaves of them, the per-commit bound, and close(). What every store does with them is in
 * store_conformance.ts.
 */
import { expect, it } from "bun:test";
import { MAX_DELETES_PER_COMMIT } from "../../../src/server/store/sqlite_store.ts";
import { waitFor } from "../../helpers/broker.ts";
import { sqliteStoreFixture } from "../../helpers/sqlite_store.ts";
import { storedMessage } from "./store_conformance.ts";

// The database's transactions, counted exactly: appends go to the database, not the journal
// (journal.ts; its own tests are in sqlite_journal_test.ts).
const { withStore, snapshotMessages } = sqliteStoreFixture({ journal: false });

/** What a crash now would leave on disk: each stored message's `not_before`. */
function delaysOnDisk(directory: string): Record<string, number> {
  return Object.fromEntries(snapshotMessages(directory).map((message) => [message.id, message.notBefore!]));
}

const DUE = 1_800_000_000_000;

it("SqliteStore.noteDelay() is on disk within commitIntervalMs, in a commit of its own, or rides with the next appends", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 20 }, async (store, directory) => {
    const [a, b, c] = [1, 2, 3].map((n) => storedMessage(n));
    await Promise.all([store.append(a!), store.append(b!)]);
    expect(store.stats.commits).toBe(1);
    store.noteDelay(a!, DUE + 1);
    expect(store.pending).toBe(1);
    await waitFor(() => store.pending === 0);
    expect(store.stats.commits).toBe(2);
    expect(delaysOnDisk(directory)).toEqual({ [a!.id]: DUE + 1, [b!.id]: 0 });
    store.noteDelay(b!, DUE + 2);
    await store.append(c!); // the next commit holds both
    expect(store.stats.commits).toBe(3);
    expect(store.pending).toBe(0);
    expect(delaysOnDisk(directory)).toEqual({ [a!.id]: DUE + 1, [b!.id]: DUE + 2, [c!.id]: 0 });
  });
});

it("SqliteStore keeps pending delays when a commit fails and writes them with the retry", async () => {
  let failing = false;
  const beforeCommit = () => {
    if (failing) throw Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });
  };
  await withStore({ mode: "fsync", commitIntervalMs: 2, retryIntervalMs: 5, beforeCommit }, async (store, directory) => {
    const [a, b, c] = [1, 2, 3].map((n) => storedMessage(n));
    await Promise.all([store.append(a!), store.append(b!), store.append(c!)]);
    failing = true;
    store.noteDelay(a!, DUE + 1);
    store.noteDelay(b!, DUE + 2);
    await waitFor(() => store.stats.failedCommits >= 2);
    expect(store.healthy).toBe(false);
    expect(store.pending).toBe(2);
    store.noteDelay(a!, DUE + 3); // nacked again meanwhile: the latest is written
    store.remove(b!); // acked meanwhile: its delay is dropped, its delete retried
    failing = false;
    await waitFor(() => store.healthy && store.pending === 0);
    expect(store.stats.updates).toBe(1);
    expect(delaysOnDisk(directory)).toEqual({ [a!.id]: DUE + 3, [c!.id]: 0 });
  });
});

it("SqliteStore splits delays beyond MAX_DELETES_PER_COMMIT into several commits, sharing the bound with deletes", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 1 }, async (store, directory) => {
    const messages = Array.from({ length: 1.5 * MAX_DELETES_PER_COMMIT }, (_, n) => storedMessage(n));
    await Promise.all(messages.map((message) => store.append(message)));
    for (const message of messages.slice(0, 10)) store.remove(message);
    for (const [n, message] of messages.entries()) store.noteDelay(message, DUE + n);
    await waitFor(() => store.pending === 0);
    expect(store.stats.commits).toBe(3);
    expect(store.stats.largestBatch).toBe(messages.length); // the appends; then 10 deletes + 9,990 delays, then 4,990 delays
    expect(store.stats.deleted).toBe(10);
    expect(store.stats.updates).toBe(messages.length - 10);
    const loaded = snapshotMessages(directory);
    expect(loaded.length).toBe(messages.length - 10);
    expect(loaded.every((message, i) => message.notBefore === DUE + i + 10)).toBe(true);
  });
});

it("SqliteStore.noteDelay() after close() is ignored, and close() writes the delays noted before", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 60_000 }, async (store, directory) => {
    const [a, b] = [1, 2].map((n) => storedMessage(n));
    await Promise.all([store.append(a!), store.append(b!)]);
    store.noteDelay(a!, DUE + 1); // the commit would wait a minute
    store.close();
    store.noteDelay(b!, DUE + 2);
    expect(delaysOnDisk(directory)).toEqual({ [a!.id]: DUE + 1, [b!.id]: 0 });
  });
});

it("SqliteStore.noteDelay() writes the count the message was nacked after with the delay, without waiting for the delivery window", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 5, deliveryCountDelayMs: 60_000 }, async (store, directory) => {
    const [a, b] = [1, 2].map((n) => storedMessage(n));
    await Promise.all([store.append(a!), store.append(b!)]);
    store.noteDelivery(b!, 1); // a delivery's count waits a minute
    store.noteDelay(a!, DUE + 1, 3);
    await waitFor(() => snapshotMessages(directory).find((row) => row.id === a!.id)?.notBefore === DUE + 1);
    const rows = Object.fromEntries(snapshotMessages(directory).map((row) => [row.id, row.deliveries]));
    expect(rows).toEqual({ [a!.id]: 3, [b!.id]: 0 });
  });
});
