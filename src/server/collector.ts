/**
 * A nudge to the garbage collector after a connection is refused for what it sent before
 * welcome. Bun copies each socket read into a fresh buffer (up to about 128 KiB); a refused
 * connection leaves that copy as garbage, and JavaScriptCore collects in proportion to the heap,
 * not to those buffers. A flood of such connections (1,000 sending a 1 MiB frame each) took
 * broker RSS 63–77 MiB above idle with a collection at most every 100 ms. During that flood a
 * full collection takes about 7 ms; waiting four times as long before the next keeps RSS 26–35 MiB
 * above idle and costs at most a fifth of a core, only during such a flood: real clients never
 * send such frames.
 */

/** Fewest milliseconds between two nudged collections. */
export const COLLECT_INTERVAL_MS = 10;

/**
 * A broker holding a large heap (a deep in-memory queue) collects more slowly: the pause before
 * the next collection is at least this many times the last one took, so the nudge never takes
 * more than 1/(COLLECT_COST_RATIO + 1) of a core, whatever the heap.
 */
export const COLLECT_COST_RATIO = 4;

let nextAt = -Infinity;

/** Runs a full collection, unless the last one was too recent for its cost. */
export function collectAfterRefusal(now = performance.now()): void {
  if (now < nextAt) return;
  Bun.gc(true);
  const end = performance.now();
  nextAt = end + Math.max(COLLECT_INTERVAL_MS, (end - now) * COLLECT_COST_RATIO);
}
