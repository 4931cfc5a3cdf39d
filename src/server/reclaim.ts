/**
 * Giving memory back after a burst. A drained spike leaves its messages as garbage; with no
 * traffic afterwards nothing makes the garbage collector run, so the memory would stay taken until
 * the next burst. Once a second the server asks `check()`: after at least `RECLAIM_AFTER`
 * messages moved (received, sent or acked) since the last collection, and a second with fewer
 * than `QUIET_PER_SECOND` of them, one full collection runs (tens of ms on a heap of this size,
 * at a quiet moment).
 *
 * That collection is also what hands the freed pages back to the OS: Bun's allocator (mimalloc)
 * purges them then, whatever `MIMALLOC_PURGE_DELAY` is, unless it is negative (never). Brokers run
 * with a delay of an hour (`npm start`, the systemd unit), so that during traffic freed pages are
 * kept for reuse and memory goes back at the first quiet second (docs/durability.md).
 *
 * Not during a burst: a full collection every 100,000 messages moved cost scenario (a) about 10%
 * of the broker's CPU and lowered the peak of scenario (g) by nothing measurable.
 *
 * Before it, durable queues nobody receives from leave their messages in the store only
 * (`reclaimMemory`): messages that arrived during the burst were allocated among its garbage,
 * and the few that stay keep the collector's blocks, and the pages under them, from going back
 * (in scenario (g) at 20,000,000 messages, a probe's queue of some 14,000 messages kept about
 * 40 MiB).
 */
import type { Logger } from "./log.ts";
import type { BrokerCounters } from "./stats/stats.ts";

/** Messages moved since the last collection before a quiet second triggers one. */
export const RECLAIM_AFTER = 200_000;
/** Fewer messages than this in the last second: the broker is quiet. */
export const QUIET_PER_SECOND = 1000;

export class Reclaimer {
  #last: number;
  #collectedAt: number;

  constructor(readonly counters: BrokerCounters, readonly collect: () => void = () => Bun.gc(true)) {
    this.#last = this.#moved();
    this.#collectedAt = this.#last;
  }

  /** Called about once a second; true when it collected. */
  check(): boolean {
    const moved = this.#moved();
    const lastSecond = moved - this.#last;
    this.#last = moved;
    if (lastSecond >= QUIET_PER_SECOND || moved - this.#collectedAt < RECLAIM_AFTER) return false;
    this.#collectedAt = moved;
    this.collect();
    return true;
  }

  #moved(): number {
    const { received, sent, acked } = this.counters;
    return received + sent + acked;
  }
}

/** What `reclaimMemory` needs of the broker. */
export interface ReclaimingBroker {
  readonly log: Logger;
  /** Leaves the messages of queues nobody receives from in the store only; returns how many. */
  releaseIdleQueues(): number;
}

/** What the Reclaimer runs: idle queues let go of their messages, then one full collection. */
export function reclaimMemory(broker: ReclaimingBroker, collect: () => void = () => Bun.gc(true)): void {
  const released = broker.releaseIdleQueues();
  if (released > 0) broker.log.info("store", `released=${released};messages of queues nobody receives from left in the store only`);
  collect();
}
