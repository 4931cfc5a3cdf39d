/**
 * The master's delayed requeues, told to its slaves (DELAY): a consumer nacked a message with a
 * delay (`done(false, s)`), and a slave promoted before it is due must hold it back as long.
 *
 * Notices are not log entries. A delay is a pause an application asked for, which the master's
 * own store writes with its next commit without an fsync (durability.md); a slave that misses one
 * delivers the message early, and loses nothing. So a notice has no index and nothing waits for
 * its acknowledgement (a slave of an earlier version skips it). Each goes to a replica behind
 * the entries already queued to it, the message's APPEND among them; a replica that attaches is
 * told every delay in force once its catch-up is written.
 */
import { encode, frame, OP } from "../../protocol/mod.ts";
import type { Queue } from "../queue/queue.ts";

/** Messages per DELAY frame: about 150 KB at the longest ids, far below a peer's frame bound. */
export const DELAYS_PER_FRAME = 1_000;

/** Delays noted since the last frame, as `messageId, at` pairs (at: ms since the epoch). */
export class DelayNotices {
  #pairs: (string | number)[] = [];

  /** Messages noted and not framed yet. */
  get size(): number {
    return this.#pairs.length / 2;
  }

  note(messageId: string, at: number): void {
    this.#pairs.push(messageId, at);
  }

  /** The DELAY frame of what was noted, with each delay as the ms left from `now`; empties the batch. */
  take(now: number): Uint8Array {
    const pairs = this.#pairs;
    this.#pairs = [];
    for (let i = 1; i < pairs.length; i += 2) pairs[i] = msLeft(pairs[i] as number, now);
    return frame(encode([OP.DELAY, pairs]));
  }

  clear(): void {
    this.#pairs = [];
  }
}

/** The DELAY frames of every copy waiting out a delay in `queues`, as of `now`. */
export function* delaysInForce(queues: Iterable<Queue>, now: number): Generator<Uint8Array> {
  let pairs: (string | number)[] = [];
  for (const queue of queues) {
    for (const copy of queue.delayedCopies()) {
      pairs.push(copy.message.id, msLeft(copy.at, now));
      if (pairs.length < 2 * DELAYS_PER_FRAME) continue;
      yield frame(encode([OP.DELAY, pairs]));
      pairs = [];
    }
  }
  if (pairs.length > 0) yield frame(encode([OP.DELAY, pairs]));
}

/** Relative, so that the brokers' clocks need not agree: a slave adds it to its own. */
function msLeft(at: number, now: number): number {
  return Math.max(0, Math.ceil(at - now));
}
