/**
 * planRebalance(): the plan POST /rebalance and `kitten-mq rebalance` ask for. Pure, no etcd.
 */
import { describe, expect, it } from "bun:test";
import { DEFAULT_MAX_MOVES, planRebalance, queueWeight } from "../../../src/server/move/rebalance.ts";

const queues = (prefix: string, count: number) => Array.from({ length: count }, (_, i) => `${prefix}${i}/v1`);

describe("planRebalance", () => {
  it("planRebalance() proposes no move when the groups are balanced", () => {
    expect(planRebalance({ g1: ["a/v1", "b/v1"], g2: ["c/v1", "d/v1"] }, {}).moves).toEqual([]);
    // One queue more on a side: moving it would only swap the sides.
    expect(planRebalance({ g1: ["a/v1", "b/v1"], g2: ["c/v1"] }, {}).moves).toEqual([]);
    // One group, or none: nowhere to move to.
    expect(planRebalance({ g1: ["a/v1", "b/v1", "c/v1"] }, {}).moves).toEqual([]);
    expect(planRebalance({}, {}).moves).toEqual([]);
  });

  it("planRebalance() moves 2 of 4 queues held by one of 2 groups, with weights before and after", () => {
    const plan = planRebalance({ g1: ["a/v1", "b/v1", "c/v1", "d/v1"], g2: [] }, {});
    expect(plan.moves).toEqual([
      { queue: "a/v1", from: "g1", to: "g2", reason: 'weight 1: group "g1" 4 → 3, group "g2" 0 → 1' },
      { queue: "b/v1", from: "g1", to: "g2", reason: 'weight 1: group "g1" 3 → 2, group "g2" 1 → 2' },
    ]);
    expect(plan.before).toEqual({ g1: 4, g2: 0 });
    expect(plan.after).toEqual({ g1: 2, g2: 2 });
  });

  it("planRebalance() weighs queues by their rates, as placement does", () => {
    expect(queueWeight(undefined)).toBe(1);
    expect(queueWeight(2500)).toBe(3.5);
    // By count g2 is the heavier (3 queues against 2), by weight g1 is (7 against 3): x moves to g2.
    const loads = { g1: { "hot/v1": 5000, "x/v1": 0 }, g2: { "a/v1": 0 } };
    const plan = planRebalance({ g1: ["hot/v1", "x/v1"], g2: ["a/v1", "b/v1", "c/v1"] }, loads);
    expect(plan.moves.map(({ queue, from, to }) => ({ queue, from, to }))).toEqual([{ queue: "x/v1", from: "g1", to: "g2" }]);
    expect(plan.after).toEqual({ g1: 6, g2: 4 });
    // The hot queue alone outweighs the rest: moving it would only move the imbalance.
    expect(planRebalance({ g1: ["hot/v1"], g2: ["a/v1", "b/v1"] }, { g1: { "hot/v1": 3000 } }).moves).toEqual([]);
    // Of several queues, the one nearest half the gap goes: g1 11.5 (1 + 2.5 + 8), g2 2, gap 9.5:
    // moving "one" leaves 7.5, "big" 6.5, "mid" 4.5.
    const mixed = planRebalance(
      { g1: ["one/v1", "mid/v1", "big/v1"], g2: ["y/v1", "z/v1"] },
      { g1: { "mid/v1": 1500, "big/v1": 7000 } },
      { max: 1 },
    );
    expect(mixed.moves.map((move) => move.queue)).toEqual(["mid/v1"]);
  });

  it("planRebalance() stops at max moves (default 10)", () => {
    const many = { g1: queues("q", 30), g2: [] };
    expect(planRebalance(many, {}).moves).toHaveLength(DEFAULT_MAX_MOVES);
    expect(planRebalance(many, {}, { max: 3 }).moves).toHaveLength(3);
    expect(planRebalance(many, {}, { max: 0 }).moves).toEqual([]);
    // Without the cap, the plan evens them out: 15 moves.
    expect(planRebalance(many, {}, { max: 100 }).moves).toHaveLength(15);
  });

  it("planRebalance() never moves a queue with a move in progress, nor a queue twice", () => {
    const plan = planRebalance({ g1: ["a/v1", "b/v1", "c/v1", "d/v1"], g2: [] }, {}, { busy: ["a/v1", "b/v1"] });
    expect(plan.moves.map((move) => move.queue)).toEqual(["c/v1", "d/v1"]);
    const stuck = planRebalance({ g1: ["a/v1", "b/v1"], g2: [] }, {}, { busy: ["a/v1", "b/v1"] });
    expect(stuck.moves).toEqual([]);
    // Three groups: each queue appears once, and the lightest group is filled first.
    const three = planRebalance({ g1: queues("q", 6), g2: [], g3: [] }, {});
    expect(three.moves.map(({ from, to }) => `${from}→${to}`)).toEqual(["g1→g2", "g1→g3", "g1→g2", "g1→g3"]);
    expect(new Set(three.moves.map((move) => move.queue)).size).toBe(4);
    expect(three.after).toEqual({ g1: 2, g2: 2, g3: 2 });
  });
});
