/**
 * What paging needs from the durable store: positions, reading one queue's messages in order from
 * a position, per-queue usage kept by every commit (and counted once by the v2 → v3 upgrade), a
 * lazy scan of everything, and the store fixtures of every format.
 */
import { Database } from "bun:sqlite";
import { afterAll, expect, it } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { memoryLogger } from "../../../src/server/log.ts";
import { migrate, ROW_OVERHEAD_BYTES, rowBytes, SCHEMA, STORE_FILE } from "../../../src/server/store/record.ts";
import { SqliteStore } from "../../../src/server/store/sqlite_store.ts";
import { waitFor } from "../../helpers/broker.ts";
import { messageIndexes } from "../../helpers/sqlite_store.ts";
import { TempDirs } from "../../helpers/temp_dir.ts";
import { storedMessage } from "./store_conformance.ts";

const temps = new TempDirs("kitten-store-paging-");
afterAll(() => temps.removeAll());

const open = (directory: string, mode: "fsync" | "batch" = "fsync") =>
  new SqliteStore({ directory, mode, commitIntervalMs: 2, logger: memoryLogger() });

it("SqliteStore.readQueue() reads one queue's messages in arrival order from a position, committed ones only", async () => {
  const store = open(temps.make());
  const messages = Array.from({ length: 30 }, (_, n) => storedMessage(n, { queue: n % 3 === 0 ? "mails/v1" : "orders/v1" }));
  await Promise.all(messages.map((message) => store.append(message)));
  const orders = messages.filter((m) => m.queue === "orders/v1");
  const first = store.readQueue("orders/v1", 0, 5);
  expect(first.map((m) => m.id)).toEqual(orders.slice(0, 5).map((m) => m.id));
  // The next page starts after the last position read.
  const next = store.readQueue("orders/v1", store.positionOf(first.at(-1)!)! + 1, 100);
  expect(next.map((m) => m.id)).toEqual(orders.slice(5).map((m) => m.id));
  expect(store.readQueue("mails/v1", 0, 100).length).toBe(10);
  // A record read stands for its row: removing it removes the row.
  store.remove(first[0]!);
  expect(store.positionOf(first[0]!)).toBeUndefined();
  store.close();
});

it("SqliteStore.readQueue() in batch mode commits confirmed appends first, so they can be read", () => {
  const store = open(temps.make(), "batch");
  for (let n = 0; n < 5; n++) store.append(storedMessage(n));
  expect(store.readQueue("orders/v1", 0, 10).map((m) => m.id)).toEqual([0, 1, 2, 3, 4].map((n) => storedMessage(n).id));
  store.close();
});

it("SqliteStore.readQueue() in batch mode refuses to read past confirmed appends its commit could not write, and reads them once it can", () => {
  let failing = true;
  const store = new SqliteStore({
    directory: temps.make(),
    mode: "batch",
    commitIntervalMs: 2,
    logger: memoryLogger(),
    beforeCommit: () => {
      if (failing) throw new Error("SQLITE_FULL: database or disk is full");
    },
  });
  for (let n = 0; n < 5; n++) store.append(storedMessage(n)); // confirmed at once in batch mode
  let refused: unknown;
  try {
    store.readQueue("orders/v1", 0, 10);
  } catch (error) {
    refused = error;
  }
  expect(refused).toMatchObject({ code: "STORE_UNAVAILABLE" });
  expect((refused as Error).message).toContain("SQLITE_FULL");
  failing = false;
  expect(store.readQueue("orders/v1", 0, 10).map((m) => m.id)).toEqual([0, 1, 2, 3, 4].map((n) => storedMessage(n).id));
  store.close();
});

it("SqliteStore keeps each queue's rows and bytes with every commit, and finds them again after a restart", async () => {
  const directory = temps.make();
  const store = open(directory);
  const messages = Array.from({ length: 12 }, (_, n) => storedMessage(n, { queue: n < 8 ? "orders/v1" : "mails/v1" }));
  await Promise.all(messages.map((message) => store.append(message)));
  const bytes = (list: typeof messages) => list.reduce((sum, m) => sum + rowBytes(m), 0);
  expect(store.queueUsage("orders/v1")).toEqual({ messages: 8, bytes: bytes(messages.slice(0, 8)) });
  expect(store.queueUsage("mails/v1")).toEqual({ messages: 4, bytes: bytes(messages.slice(8)) });
  expect(rowBytes(messages[0]!)).toBe(messages[0]!.body.length + messages[0]!.id.length + messages[0]!.destination.length + ROW_OVERHEAD_BYTES);
  for (const message of messages.slice(0, 3)) store.remove(message);
  for (const message of messages.slice(8)) store.remove(message);
  store.close();

  const reopened = open(directory);
  expect([...reopened.usage()]).toEqual([["orders/v1", { messages: 5, bytes: bytes(messages.slice(3, 8)) }]]);
  expect(reopened.queueUsage("mails/v1")).toEqual({ messages: 0, bytes: 0 });
  // scan() reads everything lazily, in arrival order.
  const scan = reopened.scan();
  expect(scan.next().value?.id).toBe(messages[3]!.id);
  expect([...scan].map((m) => m.id)).toEqual(messages.slice(4, 8).map((m) => m.id));
  reopened.close();
});

it("a commit that fails changes no usage figure", async () => {
  const directory = temps.make();
  let fail = false;
  const store = new SqliteStore({
    directory,
    logger: memoryLogger(),
    beforeCommit: () => {
      if (fail) throw new Error("disk on fire");
    },
  });
  await store.append(storedMessage(1));
  fail = true;
  await expect(store.append(storedMessage(2)) as Promise<void>).rejects.toThrow(/disk on fire/);
  expect(store.queueUsage("orders/v1").messages).toBe(1);
  fail = false;
  store.close();
  const reopened = open(directory);
  expect(reopened.queueUsage("orders/v1").messages).toBe(1);
  reopened.close();
});

const fixture = (version: number) => readFileSync(join(import.meta.dir, `fixtures/store_v${version}.sql`), "utf8");

it("the v2 → v3 upgrade counts every queue's usage once; the v3 and v4 fixtures read as written", () => {
  for (const version of [2, 3, 4]) {
    const directory = temps.make();
    const db = new Database(join(directory, STORE_FILE));
    db.run(fixture(version));
    const expected = db.query<{ queue: string; messages: number; bytes: number }, []>(
      `SELECT queue, count(*) AS messages, sum(length(body) + length(id) + length(destination) + ${ROW_OVERHEAD_BYTES}) AS bytes FROM messages GROUP BY queue`,
    ).all();
    db.close();
    const store = open(directory);
    expect(Object.fromEntries(store.usage())).toEqual(
      Object.fromEntries(expected.map(({ queue, messages, bytes }) => [queue, { messages, bytes }])),
    );
    expect(store.readQueue("orders/v1", 0, 10).length).toBe(2); // every fixture holds two orders/v1 rows
    store.close();
  }
});

it("every store fixture, once opened, has the tables and indexes of a fresh store", () => {
  const objects = (db: Database) =>
    db.query("SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name").all();
  const fresh = new Database(":memory:");
  for (const statement of SCHEMA) fresh.run(statement);
  for (const version of [1, 2, 3, 4]) {
    const db = new Database(":memory:");
    db.run(fixture(version));
    migrate(db, { directory: "/fixture" });
    expect(objects(db)).toEqual(objects(fresh));
    db.close();
  }
  fresh.close();
});

it("with deliveryCountDelayMs, a count acked within its window costs no UPDATE; one still unacked is written after it", async () => {
  const directory = temps.make();
  // Counts UPDATEs of rows: the appends go to the database, not the journal.
  const store = new SqliteStore({ directory, commitIntervalMs: 2, deliveryCountDelayMs: 60, logger: memoryLogger(), journal: false });
  const acked = storedMessage(1);
  const held = storedMessage(2);
  await Promise.all([store.append(acked), store.append(held)]);
  store.noteDelivery(acked, 1);
  store.noteDelivery(held, 1);
  store.remove(acked); // acked at once: its count is never written
  await waitFor(() => store.stats.deleted === 1);
  expect(store.stats.updates).toBe(0); // the window is still open
  await waitFor(() => store.stats.updates === 1, 2000);
  store.close();
  const reopened = open(directory);
  expect(reopened.load().map((m) => [m.id, m.deliveries])).toEqual([[held.id, 1]]);
  reopened.close();
});

it("close() writes the counts of a window still open", () => {
  const directory = temps.make();
  const store = new SqliteStore({ directory, mode: "batch", commitIntervalMs: 2, deliveryCountDelayMs: 60_000, logger: memoryLogger() });
  const message = storedMessage(1);
  store.append(message);
  store.load(); // committed
  store.noteDelivery(message, 3);
  store.close();
  const reopened = open(directory);
  expect(reopened.load().map((m) => m.deliveries)).toEqual([3]);
  reopened.close();
});

it("SqliteStore.holds() answers by id for committed rows, and not for a row whose delete is pending", async () => {
  const store = open(temps.make());
  const [kept, dropped] = [storedMessage(1), storedMessage(2)];
  await Promise.all([store.append(kept), store.append(dropped)]);
  expect(store.holds(kept.id)).toBe(true);
  expect(store.holds(dropped.id)).toBe(true);
  expect(store.holds("never-stored")).toBe(false);
  // A slave that drops a message and is sent it again must store it again: the pending delete wins.
  store.remove(dropped);
  expect(store.holds(dropped.id)).toBe(false);
  await store.close();
  const reopened = open(store.directory);
  expect(reopened.holds(dropped.id)).toBe(false);
  expect(reopened.holds(kept.id)).toBe(true);
  reopened.close();
});

it("the index by id is kept only by a store opened with indexById, and dropped by one opened without", () => {
  const directory = temps.make();
  new SqliteStore({ directory, logger: memoryLogger(), indexById: true }).close();
  expect(messageIndexes(directory)).toContain("messages_by_id");
  new SqliteStore({ directory, logger: memoryLogger(), indexById: false }).close();
  expect(messageIndexes(directory)).not.toContain("messages_by_id");
  expect(messageIndexes(directory)).toContain("messages_by_queue");
});

it("a store opened without the index by id builds it when first asked, and answers as one that had it", async () => {
  const logger = memoryLogger();
  const store = new SqliteStore({ directory: temps.make(), logger, indexById: false });
  const [kept, dropped] = [storedMessage(1), storedMessage(2)];
  await Promise.all([store.append(kept), store.append(dropped)]);
  store.remove(dropped);
  expect(store.holds(kept.id)).toBe(true);
  expect(store.holds(dropped.id)).toBe(false);
  expect(store.holds("never-stored")).toBe(false);
  expect(logger.lines.filter((line) => line.includes("built the index of messages by id")).length).toBe(1);
  store.close();
  expect(messageIndexes(store.directory)).toContain("messages_by_id");
});
