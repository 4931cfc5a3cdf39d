/**
 * Nudges to the garbage collector where JavaScriptCore's own pace leaves too much garbage behind,
 * each paced by what its collections cost so that it never takes more than a small share of a core.
 *
 * - **After a connection is refused for what it sent before welcome.** Bun copies each socket read
 *   into a fresh buffer (up to about 128 KiB); a refused connection leaves that copy as garbage,
 *   and JavaScriptCore collects in proportion to the heap, not to those buffers. A flood of such
 *   connections (1,000 sending a 1 MiB frame each) took broker RSS 63–77 MiB above idle with a
 *   collection at most every 100 ms. During that flood a full collection takes about 7 ms; waiting
 *   four times as long before the next keeps RSS 26–35 MiB above idle and costs at most a fifth of
 *   a core, only during such a flood: real clients never send such frames.
 * - **After a queue paged many sends.** A send to a durable queue past its memory budget is
 *   garbage once its commit ends (the message, its body's copy, its place in the commit), so a
 *   queue filling at 130,000 msg/s makes 50 MiB of garbage a second, and the heap grows by 2
 *   between collections. A full collection every PAGED_PER_COLLECTION paged messages (pager.ts),
 *   paced by PAGING_COST_RATIO, took the peak RSS of a 20,000,000-message fill from 241 to 210 MiB
 *   (112,072 msg/s against 117,842). Paced by 10 instead, the peak was 178 MiB and the fill
 *   99,770 msg/s.
 */

/** Fewest milliseconds between two nudged collections of one kind. */
export const COLLECT_INTERVAL_MS = 10;

/**
 * A broker holding a large heap (a deep in-memory queue) collects more slowly: the pause before
 * the next collection after refusals is at least this many times the last one took, so the nudge
 * never takes more than 1/(COLLECT_COST_RATIO + 1) of a core, whatever the heap.
 */
export const COLLECT_COST_RATIO = 4;

/**
 * The same for collections after paging, which run while clients are served: at most 1/21 of a
 * core (the fill's rate is the broker's), and on a heap whose collection takes long (a broker also
 * holding deep in-memory queues), seldom enough that their pauses stay rare.
 */
export const PAGING_COST_RATIO = 20;

/** Runs a full collection when called, unless the last one was too recent for its cost. */
export class PacedCollection {
  #nextAt = -Infinity;

  constructor(readonly costRatio: number, readonly collect: () => void = () => Bun.gc(true)) {}

  /** Returns true when it collected. */
  run(now = performance.now()): boolean {
    if (now < this.#nextAt) return false;
    this.collect();
    const end = performance.now();
    this.#nextAt = end + Math.max(COLLECT_INTERVAL_MS, (end - now) * this.costRatio);
    return true;
  }
}

const afterRefusal = new PacedCollection(COLLECT_COST_RATIO);
const afterPaging = new PacedCollection(PAGING_COST_RATIO);

/** A connection was refused for what it sent before welcome: its socket reads are garbage. */
export function collectAfterRefusal(now = performance.now()): void {
  afterRefusal.run(now);
}

/** A queue paged PAGED_PER_COLLECTION more sends: they are garbage once stored. */
export function collectAfterPaging(now = performance.now()): void {
  afterPaging.run(now);
}
