import { expect, it } from "bun:test";
import { QUIET_PER_SECOND, RECLAIM_AFTER, Reclaimer, SMALL_HEAP } from "../../src/server/reclaim.ts";

function setup(heapLeft: number) {
  const counters = { received: 0, sent: 0, acked: 0 };
  let collections = 0;
  const reclaimer = new Reclaimer(counters, { collect: () => (collections++, heapLeft) });
  return { counters, reclaimer, collections: () => collections };
}

it("Reclaimer collects during a burst every RECLAIM_AFTER messages while the heap is small, and once after it", () => {
  const { counters, reclaimer, collections } = setup(10 * 1024 * 1024);
  expect(reclaimer.check()).toBe(false); // nothing moved yet
  counters.received += RECLAIM_AFTER / 2;
  expect(reclaimer.check()).toBe(false); // busy, but not enough moved yet
  counters.sent += RECLAIM_AFTER / 2;
  expect(reclaimer.check()).toBe(true); // busy and enough moved: the heap is small
  counters.acked += QUIET_PER_SECOND - 1; // the tail of the drain: quiet now, too little since
  expect(reclaimer.check()).toBe(false);
  expect(collections()).toBe(1);
  // Little traffic, however long: no collection until RECLAIM_AFTER more moved.
  for (let second = 0; second < 100; second++) {
    counters.received += 10;
    expect(reclaimer.check()).toBe(false);
  }
  expect(collections()).toBe(1);
});

it("Reclaimer leaves a big heap to the runtime during a burst, and collects once at the first quiet second", () => {
  const { counters, reclaimer, collections } = setup(SMALL_HEAP * 4);
  counters.received += RECLAIM_AFTER;
  expect(reclaimer.check()).toBe(true); // the first one: nothing known of the heap yet
  counters.received += RECLAIM_AFTER * 3;
  expect(reclaimer.check()).toBe(false); // busy with a big heap: left alone
  expect(reclaimer.check()).toBe(true); // quiet: once
  expect(reclaimer.check()).toBe(false);
  expect(collections()).toBe(2);
});
