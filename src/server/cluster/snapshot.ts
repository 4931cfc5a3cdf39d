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
 * paged ones, read from the store page by page as the replica takes them: its rows from where its
 * paged messages start up to the newest one paged now (Backlog.last). Messages paged later (those
 * being stored now included) are not read: the list above or the live stream carries them, and a
 * queue drained meanwhile does not make the read run on into them.
 */
export function snapshotOf(queues: Iterable<Queue>, storing: Iterable<Message>, store: Store | null): Snapshot {
  const inMemory = new Set<Message>();
  const all = [...queues];
  for (const queue of all) for (const copy of queue.liveCopies()) inMemory.add(copy.message);
  for (const message of storing) inMemory.add(message);
  const messages = [...inMemory].sort((a, b) => a.seq - b.seq);
  const paged = canPage(store)
    ? all.filter((q) => q.backlog.count > 0).map((q) => ({
      name: q.name,
      from: q.backlog.from,
      count: q.backlog.count,
      upTo: q.backlog.last,
    }))
    : [];
  function* entries(): Generator<SnapshotEntry> {
    yield* messages;
    if (!canPage(store)) return;
    queues: for (const queue of paged) {
      let from = queue.from;
      for (;;) {
        const rows = store.readQueue(queue.name, from, SNAPSHOT_PAGE);
        for (const row of rows) {
          if (row.position! > queue.upTo) continue queues; // paged after the snapshot was taken
          yield row;
        }
        if (rows.length < SNAPSHOT_PAGE) break;
        from = rows.at(-1)!.position! + 1;
      }
    }
  }
  return { count: messages.length + paged.reduce((sum, q) => sum + q.count, 0), entries: entries() };
}
