/**
 * ConfirmWaiters: the sends of one burst wait as one, for the newest index among them; a send
 * never joins a waiter that settled, and nothing is confirmed before the log holds its entry.
 */
import { describe, expect, it } from "bun:test";
import { KittenError } from "../../../src/protocol/errors.ts";
import { ConfirmWaiters } from "../../../src/server/cluster/confirm_waiters.ts";
import { unhandledRejectionsOf } from "../../helpers/unhandled.ts";

function settledFlags(promises: Promise<void>[]): { done: boolean[] } {
  const state = { done: promises.map(() => false) };
  promises.forEach((promise, i) => promise.then(() => (state.done[i] = true), () => undefined));
  return state;
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

describe("ConfirmWaiters", () => {
  it("the sends of one burst share a waiter that settles once the newest of them is held", async () => {
    const waiters = new ConfirmWaiters();
    const burst = [waiters.wait(1), waiters.wait(2), waiters.wait(3)];
    expect(new Set(burst).size).toBe(1);
    expect(waiters.length).toBe(1);
    const state = settledFlags(burst);
    waiters.settle(2);
    await tick();
    expect(state.done).toEqual([false, false, false]); // entry 3 is not held yet
    waiters.settle(3);
    await tick();
    expect(state.done).toEqual([true, true, true]);
  });

  it("a new burst waits on its own, and an earlier one settles without it", async () => {
    const waiters = new ConfirmWaiters();
    const first = waiters.wait(1);
    waiters.endBurst();
    const second = waiters.wait(2);
    expect(second).not.toBe(first);
    const state = settledFlags([first, second]);
    waiters.settle(1);
    await tick();
    expect(state.done).toEqual([true, false]);
  });

  it("a send after its burst's waiter settled does not join it", async () => {
    const waiters = new ConfirmWaiters();
    const first = waiters.wait(1);
    waiters.settle(1);
    const later = waiters.wait(2); // same burst, but the waiter it would join is settled
    expect(later).not.toBe(first);
    const state = settledFlags([later]);
    await tick();
    expect(state.done).toEqual([false]);
    waiters.settle(2);
    await tick();
    expect(state.done).toEqual([true]);
  });

  it("failAll rejects every waiter, and the next send waits on a new one", async () => {
    const waiters = new ConfirmWaiters();
    const a = waiters.wait(1);
    waiters.endBurst();
    const b = waiters.wait(2);
    const error = new KittenError("NOT_ENOUGH_REPLICAS", "no replica in sync");
    waiters.failAll(error);
    expect(await a.catch((reason) => reason)).toBe(error);
    expect(await b.catch((reason) => reason)).toBe(error);
    expect(waiters.length).toBe(0);
    const c = waiters.wait(3);
    expect(c).not.toBe(b);
    waiters.settle(3);
    await c;
  });

  it("a waiter nobody awaits any more (its senders gone, a move refused) fails without an unhandled rejection", async () => {
    const unhandled = await unhandledRejectionsOf(() => {
      const waiters = new ConfirmWaiters();
      waiters.wait(1); // dropped by its caller
      waiters.failAll(new KittenError("NOT_ENOUGH_REPLICAS", "this broker is no longer master"));
    });
    expect(unhandled).toEqual([]);
  });
});
