/**
 * The log tail keeps its frames in shared chunks: what it hands out must be the bytes pushed,
 * whichever chunk they landed in, and stay so after their entries leave the tail.
 */
import { describe, expect, it } from "bun:test";
import { encode, frame, FRAME_HEADER_SIZE, OP } from "../../../src/protocol/mod.ts";
import { appendFrame } from "../../../src/protocol/hot_ops.ts";
import { LogTail } from "../../../src/server/cluster/log_tail.ts";

/** A frame of `size` bytes whose content says which entry it is. */
function entry(index: number, size: number): Uint8Array {
  const bytes = new Uint8Array(size);
  for (let i = 0; i < size; i++) bytes[i] = (index * 31 + i) & 0xff;
  return bytes;
}

describe("LogTail", () => {
  it("hands out the frames pushed, across chunks and for a frame larger than a chunk, and a view stays valid after its entry is dropped", () => {
    const tail = new LogTail(0, 3 * 1024 * 1024);
    const sizes = [100, 700_000, 900_000, 2_500_000, 50, 1_048_576, 10];
    const early = [] as Uint8Array[];
    for (let i = 0; i < sizes.length; i++) {
      const kept = tail.push(i + 1, entry(i + 1, sizes[i]!));
      if (i < 2) early.push(kept);
    }
    // Past 3 MiB the oldest went; the views given out for them still hold their bytes.
    expect(tail.base).toBeGreaterThan(2);
    expect(early[0]).toEqual(entry(1, 100));
    expect(early[1]).toEqual(entry(2, 700_000));
    const frames = tail.framesAfter(tail.base);
    expect(frames.length).toBe(tail.last - tail.base);
    frames.forEach((kept, i) => expect(kept).toEqual(entry(tail.base + 1 + i, sizes[tail.base + i]!)));
    expect(tail.bytes).toBe(frames.reduce((sum, kept) => sum + kept.length, 0));
  });

  it("adds the length prefix to a body pushed without it", () => {
    const tail = new LogTail(4);
    const body = encode([OP.REMOVE, 5, ["a", "b"]]);
    expect(tail.pushBody(5, body)).toEqual(frame(body));
    expect(tail.framesAfter(4)).toEqual([frame(body)]);
  });

  it("a truncation returns the ids the dropped entries appended, read back from their frames, and pushes go on after it", () => {
    const tail = new LogTail(0);
    const message = (id: string) => ({ id, queue: "q/v1", destination: "x", body: new Uint8Array([1, 2]), created: 7, deliveries: 0, deadLetter: null });
    tail.push(1, appendFrame(1, message("a")));
    tail.push(2, frame(encode([OP.REMOVE, 2, ["a"]])));
    tail.push(3, appendFrame(3, message("b")));
    tail.pushBody(4, appendFrame(4, message("c")).subarray(FRAME_HEADER_SIZE));
    expect(tail.truncate(1)).toEqual(["b", "c"]);
    expect(tail.last).toBe(1);
    expect(tail.bytesAfter(0)).toBe(tail.bytes);
    tail.push(2, appendFrame(2, message("d")));
    expect(tail.framesAfter(0)).toEqual([appendFrame(1, message("a")), appendFrame(2, message("d"))]);
  });

  it("keeps up to its byte bound through many entries (the ring of entries grows as needed)", () => {
    const tail = new LogTail(0, 100_000);
    for (let i = 1; i <= 50_000; i++) tail.push(i, entry(i, 1 + (i % 40)));
    expect(tail.bytes).toBeLessThanOrEqual(100_000);
    expect(tail.last).toBe(50_000);
    const frames = tail.framesAfter(tail.base);
    expect(frames.length).toBe(tail.length);
    frames.forEach((kept, i) => expect(kept).toEqual(entry(tail.base + 1 + i, 1 + ((tail.base + 1 + i) % 40))));
  });
});
