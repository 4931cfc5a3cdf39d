/**
 * SharedSettlement: items that wait on the same promise are settled by one callback; an item that
 * comes after that callback ran is never settled by it, and gets its own.
 */
import { describe, expect, it } from "bun:test";
import { SharedSettlement } from "../../src/server/shared_settlement.ts";
import { unhandledRejectionsOf } from "../helpers/unhandled.ts";

function recorder(rethrow = false) {
  const fulfilled: string[][] = [];
  const rejected: [string[], unknown][] = [];
  const settlement = new SharedSettlement<string>(
    (items) => fulfilled.push([...items]),
    (items, error) => rejected.push([[...items], error]),
    rethrow,
  );
  return { settlement, fulfilled, rejected };
}

describe("SharedSettlement", () => {
  it("settles the items added with one promise together, once, in the order added", async () => {
    const { settlement, fulfilled } = recorder();
    const commit = Promise.withResolvers<void>();
    const outcomes = ["a", "b", "c"].map((item) => settlement.add(commit.promise, item));
    expect(new Set(outcomes).size).toBe(1);
    await Promise.resolve();
    expect(fulfilled).toEqual([]); // nothing before the promise settles
    commit.resolve();
    await outcomes[0];
    expect(fulfilled).toEqual([["a", "b", "c"]]);
  });

  it("starts a new group for another promise, and each settles on its own", async () => {
    const { settlement, fulfilled } = recorder();
    const first = Promise.withResolvers<void>();
    const second = Promise.withResolvers<void>();
    const a = settlement.add(first.promise, "a");
    const b = settlement.add(second.promise, "b");
    expect(a).not.toBe(b);
    second.resolve();
    await b;
    expect(fulfilled).toEqual([["b"]]);
    first.resolve();
    await a;
    expect(fulfilled).toEqual([["b"], ["a"]]);
  });

  it("an item added with a promise whose group ran already is settled by a callback of its own", async () => {
    const { settlement, fulfilled } = recorder();
    const commit = Promise.withResolvers<void>();
    const first = settlement.add(commit.promise, "early");
    commit.resolve();
    await first;
    const second = settlement.add(commit.promise, "late");
    expect(second).not.toBe(first);
    await second;
    expect(fulfilled).toEqual([["early"], ["late"]]);
  });

  it("tells the group's items of a rejection; the outcome rejects only with rethrow", async () => {
    const quiet = recorder(false);
    const failing = Promise.withResolvers<void>();
    const outcome = quiet.settlement.add(failing.promise, "x");
    quiet.settlement.add(failing.promise, "y");
    const error = new Error("disk full");
    failing.reject(error);
    await outcome; // fulfils: the callback was told
    expect(quiet.rejected).toEqual([[["x", "y"], error]]);

    const loud = recorder(true);
    const again = Promise.withResolvers<void>();
    const rejecting = loud.settlement.add(again.promise, "z");
    again.reject(error);
    expect(await rejecting.then(() => null, (reason) => reason)).toBe(error);
    expect(loud.rejected).toEqual([[["z"], error]]);
  });

  it("with rethrow, an outcome nobody awaits (its senders gone) rejects without an unhandled rejection", async () => {
    const loud = recorder(true);
    const unhandled = await unhandledRejectionsOf(() => {
      const commit = Promise.withResolvers<void>();
      loud.settlement.add(commit.promise, "gone"); // its outcome dropped
      commit.reject(new Error("disk I/O error"));
    });
    expect(unhandled).toEqual([]);
    expect(loud.rejected).toHaveLength(1);
  });
});
