import { expect, it } from "bun:test";
import { UnackedStream } from "../../../src/server/move/unacked_stream.ts";
import { checkMoveBegin, OP } from "../../../src/protocol/mod.ts";

const bytes = (n: number, fill: number) => new Uint8Array(n).fill(fill);

it("UnackedStream keeps the chunks holding an entry not acknowledged, oldest first, and counts their bytes", () => {
  const stream = new UnackedStream();
  stream.push(3, bytes(10, 1)); // entries 1–3
  stream.push(5, bytes(20, 2)); // entries 4–5
  stream.push(9, bytes(30, 3)); // entries 6–9
  expect(stream.bytes).toBe(60);
  stream.acknowledge(4); // entry 4 held, 5 not: the second chunk stays whole
  expect([...stream.chunks()].map((chunk) => chunk[0])).toEqual([2, 3]);
  expect(stream.bytes).toBe(50);
  stream.acknowledge(9);
  expect([...stream.chunks()]).toEqual([]);
  expect(stream.bytes).toBe(0);
  stream.push(12, bytes(5, 4));
  stream.clear();
  expect({ chunks: [...stream.chunks()].length, bytes: stream.bytes }).toEqual({ chunks: 0, bytes: 0 });
});

it("UnackedStream keeps thousands of chunks in order through acknowledgements in steps", () => {
  const stream = new UnackedStream();
  for (let seq = 1; seq <= 5_000; seq++) stream.push(seq, bytes(1, seq % 256));
  for (let acked = 0; acked <= 5_000; acked += 37) {
    stream.acknowledge(acked);
    const left = [...stream.chunks()];
    expect(left.length).toBe(5_000 - acked);
    if (left.length > 0) expect(left[0]![0]).toBe((acked + 1) % 256);
  }
});

it("MOVE_BEGIN takes an optional resume, the seq of the last entry written before the link ended", () => {
  expect(checkMoveBegin([OP.MOVE_BEGIN, 1, { queue: "q/v1", move: "m1" }])[2].resume).toBeUndefined();
  expect(checkMoveBegin([OP.MOVE_BEGIN, 1, { queue: "q/v1", move: "m1", resume: 0 }])[2].resume).toBe(0);
  expect(checkMoveBegin([OP.MOVE_BEGIN, 1, { queue: "q/v1", move: "m1", resume: 20_500 }])[2].resume).toBe(20_500);
  for (const resume of [true, "7", -1, 1.5]) {
    expect(() => checkMoveBegin([OP.MOVE_BEGIN, 1, { queue: "q/v1", move: "m1", resume }])).toThrow("resume must be an unsigned integer");
  }
});
