/**
 * The checks of what a master streams to its slaves that has no seq of its own: REQUEUED (a
 * requeue, not a log entry). A frame that fails them is a BAD_REQUEST, and the slave drops the
 * link (upstream.ts) instead of applying half of it.
 */
import { describe, expect, it } from "bun:test";
import { checkRequeued, KittenError, OP } from "../../src/protocol/mod.ts";

function refusal(value: unknown[]): KittenError {
  try {
    checkRequeued(value);
  } catch (error) {
    return error as KittenError;
  }
  throw new Error("accepted");
}

describe("checkRequeued", () => {
  it("takes messageId, deliveries, msLeft triples, none included", () => {
    expect(checkRequeued([OP.REQUEUED, ["a", 1, 0, "b", 3, 60_000]])).toEqual([OP.REQUEUED, ["a", 1, 0, "b", 3, 60_000]]);
    expect(checkRequeued([OP.REQUEUED, []])).toEqual([OP.REQUEUED, []]);
  });

  it("refuses a list that is not whole triples, or longer than 100,000 messages, with BAD_REQUEST", () => {
    for (const value of [[OP.REQUEUED], [OP.REQUEUED, "a"], [OP.REQUEUED, ["a", 1]], [OP.REQUEUED, new Array(300_003).fill(0)]]) {
      const error = refusal(value);
      expect(error.code).toBe("BAD_REQUEST");
      expect(error.message).toContain("Cannot read requeued: expected [messageId, deliveries, msLeft, …]");
    }
  });

  it("refuses a triple whose id is not a string, or whose count or msLeft is not an unsigned integer", () => {
    for (const triple of [[1, 1, 0], ["a", -1, 0], ["a", 1.5, 0], ["a", 1, -5], ["a", 1, Infinity], ["a", "1", 0]]) {
      const error = refusal([OP.REQUEUED, ["ok", 0, 0, ...triple]]);
      expect(error.code).toBe("BAD_REQUEST");
      expect(error.message).toBe("Cannot read requeued: each message is a messageId, an unsigned delivery count and an unsigned msLeft");
    }
  });
});
