/**
 * snapshotOf: a queue's paged messages are read up to its newest committed row when the snapshot
 * is taken. Acks and new messages while the snapshot is streamed change neither what it lists
 * nor stretch it over rows the live stream carries.
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

/** A queue with every message paged (none in memory), as snapshotOf reads it. */
function pagedQueue(name: string, from: number, count: number): Queue {
  return { name, backlog: { from, count }, liveCopies: () => [] } as unknown as Queue;
}

it("a paged queue's snapshot lists the rows committed when it was taken, not rows added while it streams", async () => {
  const store = new SqliteStore({ directory: temps.make(), logger: memoryLogger(), indexById: false });
  const first: StoredMessage[] = Array.from({ length: 3_000 }, (_, n) => storedMessage(n, { queue: "orders/v1" }));
  await Promise.all(first.map((message) => store.append(message)));
  const snapshot = snapshotOf([pagedQueue("orders/v1", first[0]!.position!, first.length)], [], store);
  // While the snapshot streams: consumers ack the oldest 1,000, and 1,000 newer messages are stored.
  for (const message of first.slice(0, 1_000)) store.remove(message);
  const later = Array.from({ length: 1_000 }, (_, n) => storedMessage(10_000 + n, { queue: "orders/v1" }));
  await Promise.all(later.map((message) => store.append(message)));
  const listed: string[] = [];
  for (let next = snapshot.entries.next(); !next.done; next = snapshot.entries.next()) listed.push(next.value.id);
  expect(listed).toEqual(first.slice(1_000).map((message) => message.id));
  store.close();
});

it("rows of other queues and pending appends are not listed for a paged queue", async () => {
  const store = new SqliteStore({ directory: temps.make(), logger: memoryLogger(), indexById: false });
  const orders = Array.from({ length: 10 }, (_, n) => storedMessage(n, { queue: "orders/v1" }));
  const mails = Array.from({ length: 10 }, (_, n) => storedMessage(100 + n, { queue: "mails/v1" }));
  await Promise.all([...orders, ...mails].map((message) => store.append(message)));
  const pending = storedMessage(999, { queue: "orders/v1" });
  const stored = store.append(pending); // not committed when the snapshot is taken
  const snapshot = snapshotOf([pagedQueue("orders/v1", orders[0]!.position!, orders.length)], [], store);
  const listed: string[] = [];
  for (let next = snapshot.entries.next(); !next.done; next = snapshot.entries.next()) listed.push(next.value.id);
  expect(listed).toEqual(orders.map((message) => message.id));
  await stored;
  store.close();
});
