/**
 * What a master sends a replica that asks to catch up: every message it holds, in arrival order.
 */
import type { Message } from "../queue/message.ts";
import type { Queue } from "../queue/queue.ts";
import { canPage, type Store } from "../store/store.ts";
import type { Snapshot, SnapshotEntry } from "./replica.ts";

/** Paged rows read from the store per step of a replica's snapshot. */
const SNAPSHOT_PAGE = 2_000;

/**
 * The messages in memory and those being stored, in arrival order, then each durable queue's
 * paged ones, read from the store page by page as the replica takes them. A paged queue lists
 * the rows from where its paged messages started, as many as it had then (rows added since come
 * through the live stream as well: the replica recognises them).
 */
export function snapshotOf(queues: Iterable<Queue>, storing: Iterable<Message>, store: Store | null): Snapshot {
  const inMemory = new Set<Message>();
  const all = [...queues];
  for (const queue of all) for (const copy of queue.liveCopies()) inMemory.add(copy.message);
  for (const message of storing) inMemory.add(message);
  const messages = [...inMemory].sort((a, b) => a.seq - b.seq);
  const paged = canPage(store)
    ? all.filter((q) => q.backlog.count > 0).map((q) => ({ name: q.name, from: q.backlog.from, count: q.backlog.count }))
    : [];
  function* entries(): Generator<SnapshotEntry> {
    yield* messages;
    if (!canPage(store)) return;
    for (const queue of paged) {
      let from = queue.from;
      let left = queue.count;
      while (left > 0) {
        const rows = store.readQueue(queue.name, from, Math.min(left, SNAPSHOT_PAGE));
        if (rows.length === 0) break;
        yield* rows;
        left -= rows.length;
        from = rows.at(-1)!.position! + 1;
      }
    }
  }
  return { count: messages.length + paged.reduce((sum, q) => sum + q.count, 0), entries: entries() };
}
