/**
 * The master's requeues, told to its slaves (REQUEUED): a consumer nacked a message, with a delay
 * or not (`done(false, s)`), or let its ack deadline pass. A slave promoted afterwards goes on
 * from there: it holds a delayed message back as long, and counts its deliveries on
 * (`info.nbRequeues`, `requeueLimit`), as the master would have.
 *
 * Notices are not log entries. A requeue is bookkeeping the master's own store writes with its
 * next commit without an fsync (durability.md); a slave that misses one delivers the message
 * early or counts one delivery less, and loses nothing. So a notice has no index and nothing
 * waits for its acknowledgement (a slave of an earlier version skips it). Each goes to a replica
 * behind the entries already queued to it, the message's APPEND among them; a replica that
 * attaches is told every delay in force once its catch-up is written.
 */
import { encode, frame, OP } from "../../protocol/mod.ts";
import type { Queue } from "../queue/queue.ts";

/** Messages per REQUEUED frame: about 150 KB at the longest ids, far below a peer's frame bound. */
export const REQUEUES_PER_FRAME = 1_000;

/** Requeues noted since the last frame, as `messageId, deliveries, at` triples (at: ms since the epoch, 0: at once). */
export class RequeueNotices {
  #triples: (string | number)[] = [];

  /** Messages noted and not framed yet. */
  get size(): number {
    return this.#triples.length / 3;
  }

  note(messageId: string, deliveries: number, at: number): void {
    this.#triples.push(messageId, deliveries, at);
  }

  /** The REQUEUED frame of what was noted, each due time as the ms left from `now`; empties the batch. */
  take(now: number): Uint8Array {
    const triples = this.#triples;
    this.#triples = [];
    for (let i = 2; i < triples.length; i += 3) triples[i] = msLeft(triples[i] as number, now);
    return frame(encode([OP.REQUEUED, triples]));
  }

  clear(): void {
    this.#triples = [];
  }
}

/** The REQUEUED frames of every copy waiting out a delay in `queues`, as of `now`. */
export function* delaysInForce(queues: Iterable<Queue>, now: number): Generator<Uint8Array> {
  let triples: (string | number)[] = [];
  for (const queue of queues) {
    for (const copy of queue.delayedCopies()) {
      triples.push(copy.message.id, copy.deliveries, msLeft(copy.at, now));
      if (triples.length < 3 * REQUEUES_PER_FRAME) continue;
      yield frame(encode([OP.REQUEUED, triples]));
      triples = [];
    }
  }
  if (triples.length > 0) yield frame(encode([OP.REQUEUED, triples]));
}

/** Relative, so that the brokers' clocks need not agree: a slave adds it to its own. */
function msLeft(at: number, now: number): number {
  return at === 0 ? 0 : Math.max(0, Math.ceil(at - now));
}
