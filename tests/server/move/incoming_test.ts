/**
 * IncomingMove (the target's side of a queue move): once a streamed message is refused, what the
 * source streamed after it is not acknowledged, and the commits still running for it may fail
 * too without anything left to wait for them: such a failure must not reach the process as an
 * unhandled rejection (a broker ends on one).
 */
import { describe, expect, it } from "bun:test";
import { KittenError, OP } from "../../../src/protocol/mod.ts";
import type { Mirror } from "../../../src/server/cluster/mirror.ts";
import { IncomingMove } from "../../../src/server/move/incoming.ts";
import { TrafficMeter } from "../../../src/server/move/traffic.ts";
import { unhandledRejectionsOf } from "../../helpers/unhandled.ts";

const QUEUE = "mv/v1";
const tick = () => new Promise((resolve) => setImmediate(resolve));

/** A target whose appends wait on promises the test settles. */
function target() {
  const commits: PromiseWithResolvers<void>[] = [];
  const pushed: unknown[][] = [];
  const refused: { ref: number; code: string }[] = [];
  const move = new IncomingMove({
    begin: () => Promise.resolve({} as Mirror),
    append: () => {
      const commit = Promise.withResolvers<void>();
      commits.push(commit);
      return commit.promise;
    },
    traffic: new TrafficMeter(() => 0),
    isPeer: true,
    clientId: "g1-1",
    push: (op) => pushed.push(op),
    confirm: (ref) => pushed.push([OP.OK, ref]),
    refuse: (ref, error) => refused.push({ ref, code: error.code }),
  });
  return { move, commits, pushed, refused };
}

const append = (seq: number): Parameters<IncomingMove["append"]>[0] =>
  [OP.MOVE_APPEND, seq, `m${seq}`, QUEUE, "x", new Uint8Array([1]), 0, 0, null] as unknown as Parameters<IncomingMove["append"]>[0];

describe("IncomingMove", () => {
  it("acknowledges what is held, refuses at the first failed commit, and leaves no rejection unhandled after it", async () => {
    const { move, commits, pushed, refused } = target();
    move.handle([OP.MOVE_BEGIN, 7, { queue: QUEUE, move: "mv-1" }]);
    await tick();
    expect(pushed).toEqual([[OP.OK, 7]]);

    move.append(append(1));
    await tick();
    commits[0]!.resolve();
    await tick();
    expect(pushed.at(-1)).toEqual([OP.MOVE_ACK, 1, null]);

    move.append(append(2));
    await tick();
    const tooFew = () => new KittenError("NOT_ENOUGH_REPLICAS", "Cannot confirm: this broker is no longer master");
    commits[1]!.reject(tooFew());
    await tick();
    expect(refused).toEqual([{ ref: 2, code: "NOT_ENOUGH_REPLICAS" }]);

    // Streamed after the refusal: not acknowledged, and its commit fails with nobody waiting.
    const unhandled = await unhandledRejectionsOf(async () => {
      move.append(append(3));
      await tick();
      commits[2]!.reject(tooFew());
    });
    expect(unhandled).toEqual([]);
    expect(pushed.filter((op) => op[0] === OP.MOVE_ACK)).toEqual([[OP.MOVE_ACK, 1, null]]);
    expect(refused).toHaveLength(1);
  });
});
