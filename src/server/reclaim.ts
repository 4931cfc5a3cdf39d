/**
 * Keeping memory down through a burst and giving it back after. The allocator keeps what it has
 * once had (`MIMALLOC_PURGE_DELAY=-1`, which throughput needs: see the README's Performance
 * section), so the broker's resident memory is the highest its heap ever grew, and that height is
 * mostly garbage waiting for a full collection. Once a second the server asks `check()`:
 *
 * - during a burst (at least `RECLAIM_AFTER` messages moved since the last collection), one full
 *   collection, but only while the heap that survived the last one is small (`SMALL_HEAP`: a few
 *   ms each; a memory queue holding hundreds of MiB is left to the runtime's own schedule);
 * - after a burst, at the first second with fewer than `QUIET_PER_SECOND` messages, one more.
 *
 * A durable queue's heap stays small at any depth (its messages beyond the budget are on disk), so
 * a backlog's fill and drain keep the heap near its budget instead of growing to several times it.
 */
import type { BrokerCounters } from "./stats.ts";

/** Messages moved (received, sent or acked) since the last collection before one is due. */
export const RECLAIM_AFTER = 100_000;
/** Fewer messages than this in the last second: the broker is quiet. */
export const QUIET_PER_SECOND = 1000;
/** Collections during a burst only while the heap left by the last one is below this. */
export const SMALL_HEAP = 64 * 1024 * 1024;

export interface ReclaimerOptions {
  /** Runs a full collection and returns the bytes of heap left (tests pass a fake). */
  collect?: () => number;
}

export class Reclaimer {
  #last: number;
  #collectedAt: number;
  #heapLeft = 0;
  readonly #collect: () => number;

  constructor(readonly counters: BrokerCounters, options: ReclaimerOptions = {}) {
    this.#collect = options.collect ?? (() => {
      Bun.gc(true);
      return process.memoryUsage().heapUsed;
    });
    this.#last = this.#moved();
    this.#collectedAt = this.#last;
  }

  /** Called about once a second; true when it collected. */
  check(): boolean {
    const moved = this.#moved();
    const lastSecond = moved - this.#last;
    this.#last = moved;
    if (moved - this.#collectedAt < RECLAIM_AFTER) return false;
    const quiet = lastSecond < QUIET_PER_SECOND;
    if (!quiet && this.#heapLeft >= SMALL_HEAP) return false;
    this.#collectedAt = moved;
    this.#heapLeft = this.#collect();
    return true;
  }

  #moved(): number {
    const { received, sent, acked } = this.counters;
    return received + sent + acked;
  }
}
