/**
 * A nudge to the garbage collector after a connection is refused for what it sent before
 * welcome. Bun copies each socket read into a fresh buffer (up to about 128 KiB); a refused
 * connection leaves that copy as garbage, and JavaScriptCore collects in proportion to the heap,
 * not to those buffers. A flood of such connections (1,000 sending a 1 MiB frame each) then took
 * broker RSS about 60 MiB above idle before the collector ran; a full collection at most every
 * COLLECT_INTERVAL_MS keeps it near 30 MiB. Real clients never send such frames, so the nudge
 * costs nothing outside an attack, and during one at most a few ms every interval.
 */

/** Fewest milliseconds between two nudged collections. */
export const COLLECT_INTERVAL_MS = 100;

let collectedAt = -Infinity;

/** Runs a full collection, unless one ran in the last COLLECT_INTERVAL_MS. */
export function collectAfterRefusal(now = performance.now()): void {
  if (now - collectedAt < COLLECT_INTERVAL_MS) return;
  collectedAt = now;
  Bun.gc(true);
}
