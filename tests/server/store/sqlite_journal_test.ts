/**
 * The store's journal (journal.ts): appends confirmed from one fsynced frame, messages acked soon
 * after never written to the database, what a crash leaves (torn frames, a settle whose file was
 * not emptied), and when the journal settles into the database.
 */
import { Database } from "bun:sqlite";
import { expect, it } from "bun:test";
import { appendFileSync, copyFileSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { memoryLogger } from "../../../src/server/log.ts";
import { JOURNAL_FILES, JOURNAL_LIVE_MESSAGES, JOURNAL_SEGMENT_MIN_BYTES, JOURNAL_SETTLE_MESSAGES } from "../../../src/server/store/journal.ts";
import { STORE_FILE } from "../../../src/server/store/record.ts";
import { SqliteStore } from "../../../src/server/store/sqlite_store.ts";
import type { StoredMessage } from "../../../src/server/store/store.ts";
import { waitFor } from "../../helpers/broker.ts";
import { sqliteStoreFixture, storeRejection } from "../../helpers/sqlite_store.ts";
import { runStoreConformance, storedMessage } from "./store_conformance.ts";

const { temps, withStore, snapshotMessages } = sqliteStoreFixture();

/** The message rows of the database alone (a copy of it and its WAL, without the journal). */
function databaseRows(directory: string): string[] {
  const copy = temps.make();
  for (const name of [STORE_FILE, `${STORE_FILE}-wal`]) {
    try {
      copyFileSync(join(directory, name), join(copy, name));
    } catch {
      // No WAL yet.
    }
  }
  const db = new Database(join(copy, STORE_FILE), { readonly: true });
  try {
    return db.query<{ id: string }, []>("SELECT id FROM messages ORDER BY seq").all().map((row) => row.id);
  } finally {
    db.close();
  }
}

/** Bytes in the journal's files. */
const journalBytes = (directory: string) => JOURNAL_FILES.reduce((sum, name) => sum + statSync(join(directory, name)).size, 0);
/** The file written first. */
const FIRST = JOURNAL_FILES[0];
/** Copies the store's files, as a crash at this instant leaves them. */
function copyStoreFiles(from: string, to: string): void {
  for (const name of [STORE_FILE, `${STORE_FILE}-wal`, ...JOURNAL_FILES]) copyFileSync(join(from, name), join(to, name));
}
const nothingPending = (store: SqliteStore) => waitFor(() => store.pending === 0, 2000, "nothing waits for a commit");

it("an fsync append is confirmed once its journal frame is on disk: a crash keeps it, though the database has no row of it", async () => {
  await withStore({ mode: "fsync" }, async (store, directory) => {
    const messages = [1, 2, 3].map((n) => storedMessage(n));
    const results = messages.map((message) => store.append(message));
    expect(snapshotMessages(directory)).toEqual([]); // nothing written before the commit
    await Promise.all(results);
    expect(store.stats).toMatchObject({ journaled: 3, journalSyncs: 1, inserted: 0, commits: 0 });
    expect(snapshotMessages(directory).map((m) => m.id)).toEqual(messages.map((m) => m.id));
    expect(databaseRows(directory)).toEqual([]);
  });
});

it("messages acked soon after their confirmation never reach the database, and a crash does not bring them back", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 1 }, async (store, directory) => {
    const messages = Array.from({ length: 100 }, (_, n) => storedMessage(n));
    await Promise.all(messages.map((message) => store.append(message)));
    for (const message of messages.slice(0, 99)) store.remove(message);
    await nothingPending(store);
    expect(store.stats).toMatchObject({ journaled: 100, inserted: 0, deleted: 0 });
    expect(snapshotMessages(directory).map((m) => m.id)).toEqual([messages[99]!.id]);
    expect(databaseRows(directory)).toEqual([]);
  });
});

it("a journaled message keeps its fields through a crash: count, delay, dead letter, body, destination", async () => {
  await withStore({ mode: "fsync" }, async (store, directory) => {
    const deadLetter = { reason: "requeueLimit" as const, channel: "orders/v1/shop-1", messageId: "sender.x", deliveries: 5 };
    const message = storedMessage(7, { id: "sender.ünïcode", deliveries: 3, notBefore: 1_800_000_000_000, deadLetter });
    await store.append(message);
    const [read] = snapshotMessages(directory);
    expect(read).toMatchObject({
      id: message.id,
      queue: message.queue,
      destination: message.destination,
      created: message.created,
      deliveries: 3,
      notBefore: 1_800_000_000_000,
      deadLetter,
    });
    expect(new TextDecoder().decode(read!.body)).toBe("body of message 7");
  });
});

it("a torn frame at the end of the journal is dropped at open, and later frames are written after the whole ones", async () => {
  const original = temps.make();
  const crashed = temps.make();
  const first = storedMessage(1);
  const store = new SqliteStore({ directory: original, logger: memoryLogger() });
  await store.append(first);
  copyStoreFiles(original, crashed);
  store.close();
  // Half a frame: a length that runs past the end of the file, as a machine crash mid-write leaves.
  appendFileSync(join(crashed, FIRST), new Uint8Array([200, 0, 0, 0, 1, 2, 3, 4, 1, 0, 0]));
  const reopened = new SqliteStore({ directory: crashed, logger: memoryLogger() });
  try {
    const second = storedMessage(2);
    await reopened.append(second);
    expect(snapshotMessages(crashed).map((m) => m.id)).toEqual([first.id, second.id]);
  } finally {
    reopened.close();
  }
});

it("a settle moves the unacked messages into the database and empties the journal; a journal left full by a crash after it is not read twice", async () => {
  await withStore({ mode: "fsync" }, async (store, directory) => {
    const [kept, acked] = [storedMessage(1), storedMessage(2)];
    await Promise.all([store.append(kept), store.append(acked)]);
    const beforeSettle = readFileSync(join(directory, FIRST));
    expect(beforeSettle.length).toBeGreaterThan(0);
    // A read by queue needs every message in the database.
    expect(store.readQueue(kept.queue, 0, 10).map((m) => m.id)).toEqual([kept.id, acked.id]);
    expect(store.stats.settles).toBe(1);
    expect(journalBytes(directory)).toBe(0);
    expect(databaseRows(directory)).toEqual([kept.id, acked.id]);
    store.remove(acked); // a row now: deleted from the database
    await nothingPending(store);
    // The crash came between the settle's commit and the file being emptied: the old frames are back.
    writeFileSync(join(directory, FIRST), beforeSettle);
    expect(snapshotMessages(directory).map((m) => m.id)).toEqual([kept.id]);
  });
});

it("positions are never given twice, even when every row was acked and the journal emptied before a restart", async () => {
  const directory = temps.make();
  const store = new SqliteStore({ directory, logger: memoryLogger() });
  const first = storedMessage(1);
  await store.append(first);
  const firstPosition = first.position!;
  store.readQueue(first.queue, 0, 10); // settled: its position is in journal_through
  store.remove(first);
  store.close();
  const reopened = new SqliteStore({ directory, logger: memoryLogger() });
  const second = storedMessage(2);
  await reopened.append(second);
  expect(second.position).toBeGreaterThan(firstPosition);
  // Were the position reused, a crash now would skip the journaled message as settled already.
  expect(snapshotMessages(directory).map((m) => m.id)).toEqual([second.id]);
  reopened.close();
});

it(`past ${JOURNAL_LIVE_MESSAGES} unacked messages the oldest are settled, ${JOURNAL_SETTLE_MESSAGES} per commit, and the rest stay journaled`, async () => {
  await withStore({ mode: "fsync" }, async (store, directory) => {
    const total = JOURNAL_LIVE_MESSAGES + 3000;
    const messages: StoredMessage[] = [];
    for (let n = 0; n < total; n += 500) {
      const batch = Array.from({ length: Math.min(500, total - n) }, (_, i) => storedMessage(n + i));
      messages.push(...batch);
      await Promise.all(batch.map((message) => store.append(message)));
    }
    await nothingPending(store);
    // Each settle brings the journal a settle's worth under the bound: the oldest, not all of them.
    expect(store.stats.settles).toBeGreaterThanOrEqual(2);
    expect(store.stats.inserted).toBeGreaterThanOrEqual(total - JOURNAL_LIVE_MESSAGES);
    expect(store.stats.inserted).toBeLessThanOrEqual(total - (JOURNAL_LIVE_MESSAGES - JOURNAL_SETTLE_MESSAGES) + 500);
    const rows = databaseRows(directory);
    expect(rows).toEqual(messages.slice(0, rows.length).map((m) => m.id));
    expect(snapshotMessages(directory).map((m) => m.id)).toEqual(messages.map((m) => m.id));
    expect(store.queueUsage("orders/v1").messages).toBe(total);
    // An ack of a settled message deletes its row; of a journaled one, writes a REMOVE.
    store.remove(messages[0]!);
    store.remove(messages[total - 1]!);
    await nothingPending(store);
    expect(store.stats.deleted).toBe(1);
    expect(snapshotMessages(directory).length).toBe(total - 2);
  });
});

it("20,000 sends in flight (several clients' windows), acked after their confirmation, never reach the database", async () => {
  await withStore({ mode: "fsync" }, async (store, directory) => {
    const messages = Array.from({ length: 20_000 }, (_, n) => storedMessage(n));
    for (let n = 0; n < messages.length; n += 2000) await Promise.all(messages.slice(n, n + 2000).map((message) => store.append(message)));
    for (const message of messages) store.remove(message);
    await waitFor(() => store.pending === 0 && store.queueUsage("orders/v1").messages === 0, 2000, "every ack written");
    expect(store.stats).toMatchObject({ settles: 0, inserted: 0, journaled: 20_000 });
    expect(databaseRows(directory)).toEqual([]);
  });
});

it(`a file emptied so that writing can move back to it is settled ${JOURNAL_SETTLE_MESSAGES} messages per commit, and nothing in it is lost`, async () => {
  // A disk with 16 MiB free: the files' limit is 1 MiB.
  await withStore({ mode: "fsync", commitIntervalMs: 1, readFree: () => 16 * 1024 * 1024 }, async (store, directory) => {
    const body = new Uint8Array(100);
    let n = 0;
    const kept = Array.from({ length: 8000 }, () => storedMessage(n++, { body }));
    for (let i = 0; i < kept.length; i += 1000) await Promise.all(kept.slice(i, i + 1000).map((message) => store.append(message)));
    expect(store.stats.settles).toBe(0); // the first file filled, and writing moved to the empty second one
    // Sends acked at once fill the second file: writing must move back to the first, still live.
    for (let round = 0; round < 200 && store.stats.inserted < 6000; round++) {
      const batch = Array.from({ length: 200 }, () => storedMessage(n++, { body }));
      await Promise.all(batch.map((message) => store.append(message)));
      for (const message of batch) store.remove(message);
      await nothingPending(store);
    }
    expect(store.stats.inserted).toBeGreaterThan(2 * JOURNAL_SETTLE_MESSAGES);
    expect(store.stats.settles).toBeGreaterThanOrEqual(Math.ceil(store.stats.inserted / JOURNAL_SETTLE_MESSAGES));
    const rows = databaseRows(directory);
    expect(rows).toEqual(kept.slice(0, rows.length).map((m) => m.id));
    expect(snapshotMessages(directory).map((m) => m.id)).toEqual(kept.map((m) => m.id));
  });
});

it("a delivery count or a delay due settles the journal: the message's row carries it", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 1 }, async (store, directory) => {
    const [counted, delayed] = [storedMessage(1), storedMessage(2)];
    await Promise.all([store.append(counted), store.append(delayed)]);
    store.noteDelivery(counted, 2);
    store.noteDelay(delayed, 1_900_000_000_000, 1);
    await nothingPending(store);
    expect(store.stats.settles).toBe(1);
    expect(databaseRows(directory)).toEqual([counted.id, delayed.id]);
    const read = snapshotMessages(directory).map((m) => [m.id, m.deliveries, m.notBefore]);
    expect(read).toEqual([[counted.id, 2, 0], [delayed.id, 1, 1_900_000_000_000]]);
  });
});

it("a count due for a database row is an UPDATE that leaves the journal as it is; one for a pending append is written in its row", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 1 }, async (store, directory) => {
    const row = storedMessage(1);
    await store.append(row);
    store.readQueue(row.queue, 0, 10); // a row now
    const journaled = storedMessage(2);
    await store.append(journaled);
    store.noteDelivery(row, 3);
    await waitFor(() => store.stats.updates === 1);
    expect(store.stats.settles).toBe(1); // the readQueue's only
    expect(databaseRows(directory)).toEqual([row.id]);
    // A count noted while the append waits for its commit, the journal empty: journaled, then
    // settled in the same commit, its row carries the count.
    store.readQueue(row.queue, 0, 10);
    const pending = storedMessage(3);
    const stored = store.append(pending);
    store.noteDelivery(pending, 2);
    await stored;
    await nothingPending(store);
    expect(store.stats.settles).toBe(3);
    expect(snapshotMessages(directory).map((m) => [m.id, m.deliveries])).toEqual([[row.id, 3], [journaled.id, 0], [pending.id, 2]]);
  });
});

it("a nack's delay settles the journal up to the nacked message only: the newer messages stay journaled", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 1 }, async (store, directory) => {
    const messages = [1, 2, 3, 4].map((n) => storedMessage(n));
    await Promise.all(messages.map((message) => store.append(message)));
    store.noteDelay(messages[1]!, 1_900_000_000_000, 1);
    await nothingPending(store);
    expect(store.stats.settles).toBe(1);
    expect(databaseRows(directory)).toEqual([messages[0]!.id, messages[1]!.id]);
    const read = snapshotMessages(directory).map((m) => [m.id, m.deliveries, m.notBefore]);
    expect(read).toEqual([[messages[0]!.id, 0, 0], [messages[1]!.id, 1, 1_900_000_000_000], [messages[2]!.id, 0, 0], [messages[3]!.id, 0, 0]]);
    // A later delay of a row is an UPDATE: the journal keeps the other two.
    store.noteDelay(messages[0]!, 1_900_000_000_500);
    await nothingPending(store);
    expect(store.stats.settles).toBe(1);
    expect(databaseRows(directory)).toEqual([messages[0]!.id, messages[1]!.id]);
    expect(snapshotMessages(directory)[0]!.notBefore).toBe(1_900_000_000_500);
  });
});

it("a failed journal write rejects its appends with STORE_UNAVAILABLE, confirms none of them, and the next write succeeds", async () => {
  let failing = true;
  const beforeCommit = () => {
    if (failing) throw Object.assign(new Error("disk I/O error"), { code: "SQLITE_IOERR" });
  };
  await withStore({ mode: "fsync", beforeCommit, retryIntervalMs: 5 }, async (store, directory) => {
    const lost = storedMessage(1);
    const refusal = await storeRejection(store.append(lost));
    expect(refusal.code).toBe("STORE_UNAVAILABLE");
    expect(store.healthy).toBe(false);
    failing = false;
    const kept = storedMessage(2);
    await store.append(kept);
    expect(store.healthy).toBe(true);
    expect(snapshotMessages(directory).map((m) => m.id)).toEqual([kept.id]);
  });
});

it("holds() and the usage figures count journaled messages, before and after a restart", async () => {
  const directory = temps.make();
  const store = new SqliteStore({ directory, logger: memoryLogger() });
  const [kept, acked] = [storedMessage(1), storedMessage(2)];
  await Promise.all([store.append(kept), store.append(acked)]);
  expect(store.holds(kept.id)).toBe(true);
  store.remove(acked);
  expect(store.holds(acked.id)).toBe(false);
  await nothingPending(store);
  expect(store.queueUsage(kept.queue).messages).toBe(1);
  // Restarted from what a crash leaves: the journal is read back and counted.
  const crashed = temps.make();
  copyStoreFiles(directory, crashed);
  store.close();
  const reopened = new SqliteStore({ directory: crashed, logger: memoryLogger() });
  expect(reopened.queueUsage(kept.queue).messages).toBe(1);
  expect(reopened.holds(kept.id)).toBe(true);
  expect(reopened.load().map((m) => m.id)).toEqual([kept.id]);
  reopened.close();
  // Settled at close: the table has it too.
  const again = new SqliteStore({ directory: crashed, logger: memoryLogger() });
  expect(again.queueUsage(kept.queue).messages).toBe(1);
  expect(journalBytes(crashed)).toBe(0);
  again.close();
});

it("writing moves to the other file once one is full; one with nothing live left is recycled, one still holding messages has only those settled", async () => {
  // A disk with 1 MiB free: the files' limit is JOURNAL_SEGMENT_MIN_BYTES.
  await withStore({ mode: "fsync", commitIntervalMs: 1, readFree: () => 1024 * 1024 }, async (store, directory) => {
    const body = new Uint8Array(1000);
    let n = 0;
    /** One batch of 20 appends (about 21 KB), acked at once. */
    const churn = async () => {
      const batch = Array.from({ length: 20 }, () => storedMessage(n++, { body }));
      await Promise.all(batch.map((message) => store.append(message)));
      for (const message of batch) store.remove(message);
      await nothingPending(store);
    };
    for (let i = 0; i < 20; i++) await churn(); // about 6 turns of a 64 KiB file
    expect(store.stats).toMatchObject({ settles: 0, inserted: 0, journaled: 400 });
    expect(journalBytes(directory)).toBeLessThan(2 * (JOURNAL_SEGMENT_MIN_BYTES + 25_000));
    // A message left unacked: the file holding it is settled when writing must move back to it.
    const kept = storedMessage(n++, { body });
    await store.append(kept);
    for (let i = 0; i < 8; i++) await churn();
    expect(store.stats.settles).toBe(1);
    expect(store.stats.inserted).toBe(1);
    expect(databaseRows(directory)).toEqual([kept.id]);
    expect(snapshotMessages(directory).map((m) => m.id)).toEqual([kept.id]);
    expect(store.queueUsage(kept.queue).messages).toBe(1);
  });
});

it("writing moves back to a file by writing it over from its start: it keeps its size, and a crash reads only what this turn wrote", async () => {
  // A disk with 1 MiB free: the files' limit is JOURNAL_SEGMENT_MIN_BYTES.
  await withStore({ mode: "fsync", commitIntervalMs: 1, readFree: () => 1024 * 1024 }, async (store, directory) => {
    const body = new Uint8Array(1000);
    let n = 0;
    const acked: string[] = [];
    /** One batch of 20 appends (about 21 KB), acked at once: every batch writes the same frames. */
    const churn = async () => {
      const batch = Array.from({ length: 20 }, () => storedMessage(n++, { body }));
      await Promise.all(batch.map((message) => store.append(message)));
      for (const message of batch) store.remove(message);
      acked.push(...batch.map((message) => message.id));
      await nothingPending(store);
    };
    // About 190 KB: each file was filled once (four batches), and writing moved back to the first.
    for (let i = 0; i < 9; i++) await churn();
    // Neither file was truncated: the one written now is still as long as its earlier turn left it.
    for (const name of JOURNAL_FILES) expect(statSync(join(directory, name)).size).toBeGreaterThanOrEqual(JOURNAL_SEGMENT_MIN_BYTES);
    const kept = storedMessage(n++, { body });
    await store.append(kept);
    // The earlier turn's frames past this turn's end hold appends whose removes were written over.
    const crashed = snapshotMessages(directory).map((m) => m.id);
    expect(crashed).toEqual([kept.id]);
    expect(acked.filter((id) => crashed.includes(id))).toEqual([]);
    expect(store.stats).toMatchObject({ settles: 0, inserted: 0, journaled: 181 });
  });
});

it("a settle with removes of journaled messages still waiting for their frame leaves the usage figures right", async () => {
  await withStore({ mode: "fsync", commitIntervalMs: 60_000 }, async (store) => {
    const [kept, acked] = [storedMessage(1), storedMessage(2)];
    await Promise.all([store.append(kept), store.append(acked)]);
    store.remove(acked); // its REMOVE waits for the next frame
    expect(store.readQueue(kept.queue, 0, 10).map((m) => m.id)).toEqual([kept.id]); // settles
    expect(store.queueUsage(kept.queue).messages).toBe(1);
    store.remove(kept);
    expect(store.load()).toEqual([]); // commits the delete
    expect(store.queueUsage(kept.queue).messages).toBe(0);
  });
});

/** The conformance suite on a store whose every commit writes the database (no journal). */
function unjournaled() {
  return async () => {
    const directory = temps.make();
    const open = () => new SqliteStore({ directory, commitIntervalMs: 2, logger: memoryLogger(), journal: false });
    let current = open();
    const store = current;
    return {
      store,
      updates: () => store.stats.updates,
      committed: () => waitFor(() => current.pending === 0, 2000, "nothing waits for a commit"),
      reopen: () => {
        current.close();
        current = open();
        return Promise.resolve(current);
      },
      cleanup: () => Promise.resolve(current.close()),
    };
  };
}

runStoreConformance("SqliteStore (fsync, no journal)", unjournaled(), { durable: true });
