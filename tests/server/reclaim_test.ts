import { expect, it } from "bun:test";
import { QUIET_PER_SECOND, RECLAIM_AFTER, Reclaimer } from "../../src/server/reclaim.ts";

it("Reclaimer collects once after a burst, at the first quiet second, and not again until the next burst", () => {
  const counters = { received: 0, sent: 0, acked: 0 };
  let collections = 0;
  const reclaimer = new Reclaimer(counters, () => collections++);
  expect(reclaimer.check()).toBe(false); // nothing moved yet

  // A busy second of a burst: no collection while traffic flows.
  counters.received += RECLAIM_AFTER / 2;
  counters.sent += RECLAIM_AFTER / 2;
  expect(reclaimer.check()).toBe(false);
  counters.acked += QUIET_PER_SECOND - 1; // the tail of the drain: quiet now
  expect(reclaimer.check()).toBe(true);
  expect(collections).toBe(1);
  expect(reclaimer.check()).toBe(false); // still quiet, nothing new to give back

  // Little traffic, however long: no collection.
  for (let second = 0; second < 100; second++) {
    counters.received += 10;
    expect(reclaimer.check()).toBe(false);
  }
  expect(collections).toBe(1);
});
