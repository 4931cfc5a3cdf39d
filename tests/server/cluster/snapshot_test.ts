/**
 * snapshotOf: a queue's paged messages are read up to the newest one paged when the snapshot is
 * taken. Acks and new messages while the snapshot is streamed neither change what it lists nor
 * stretch it over rows the live stream carries.
 */
import { afterAll, expect, it } from "bun:test";
import { snapshotOf } from "../../../src/server/cluster/snapshot.ts";
import type { Queue } from "../../../src/server/queue/queue.ts";
import { memoryLogger } from "../../../src/server/log.ts";
import { SqliteStore } from "../../../src/server/store/sqlite_store.ts";
import type { StoredMessage } from "../../../src/server/store/store.ts";
import { TempDirs } from "../../helpers/temp_dir.ts";
import { storedMessage } from "../store/store_conformance.ts";

const temps = new TempDirs();
afterAll(() => temps.removeAll());

/** A queue whose messages are all paged (none in memory), as snapshotOf reads it. */
function pagedQueue(name: string, paged: StoredMessage[]): Queue {
  const backlog = { from: paged[0]!.position!, last: paged.at(-1)!.position!, count: paged.length };
  return { name, backlog, liveCopies: () => [] } as unknown as Queue;
}

function listed(snapshot: ReturnType<typeof snapshotOf>): string[] {
  const ids: string[] = [];
  for (let next = snapshot.entries.next(); !next.done; next = snapshot.entries.next()) ids.push(next.value.id);
  return ids;
}

it("a paged queue's snapshot lists the messages paged when it was taken, not rows added while it streams", async () => {
  const store = new SqliteStore({ directory: temps.make(), logger: memoryLogger(), indexById: false });
  const first: StoredMessage[] = Array.from({ length: 3_000 }, (_, n) => storedMessage(n, { queue: "orders/v1" }));
  await Promise.all(first.map((message) => store.append(message)));
  const snapshot = snapshotOf([pagedQueue("orders/v1", first)], [], store);
  // While the snapshot streams: consumers ack the oldest 1,000, and 1,000 newer messages are stored.
  for (const message of first.slice(0, 1_000)) store.remove(message);
  const later = Array.from({ length: 1_000 }, (_, n) => storedMessage(10_000 + n, { queue: "orders/v1" }));
  await Promise.all(later.map((message) => store.append(message)));
  expect(listed(snapshot)).toEqual(first.slice(1_000).map((message) => message.id));
  store.close();
});

it("rows of other queues, and messages stored since that are not paged yet, are not listed", async () => {
  const store = new SqliteStore({ directory: temps.make(), logger: memoryLogger(), indexById: false });
  const orders = Array.from({ length: 10 }, (_, n) => storedMessage(n, { queue: "orders/v1" }));
  const mails = Array.from({ length: 10 }, (_, n) => storedMessage(100 + n, { queue: "mails/v1" }));
  await Promise.all([...orders, ...mails].map((message) => store.append(message)));
  const storing = storedMessage(999, { queue: "orders/v1" });
  const stored = store.append(storing); // being stored: the snapshot lists it with those in memory
  const snapshot = snapshotOf([pagedQueue("orders/v1", orders)], [], store);
  expect(listed(snapshot)).toEqual(orders.map((message) => message.id));
  await stored;
  store.close();
});

it("a batch-mode message paged before its commit is listed (its row is committed for the read)", () => {
  const store = new SqliteStore({ directory: temps.make(), logger: memoryLogger(), mode: "batch", commitIntervalMs: 60_000, indexById: false });
  const paged = Array.from({ length: 5 }, (_, n) => storedMessage(n, { queue: "orders/v1" }));
  for (const message of paged) store.append(message); // confirmed at once, committed later
  const snapshot = snapshotOf([pagedQueue("orders/v1", paged)], [], store);
  expect(listed(snapshot)).toEqual(paged.map((message) => message.id));
  store.close();
});
