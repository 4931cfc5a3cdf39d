/**
 * Socket chunks are Node/Bun `Buffer`s, whose `slice()` is a view, and a runtime may hand the same
 * memory to the next read. Whatever the protocol code keeps past one call must be its own copy.
 */
import { expect, it } from "bun:test";
import { encode } from "../../src/protocol/cbor.ts";
import { FrameDecoder } from "../../src/protocol/frame.ts";
import { readSend } from "../../src/protocol/hot_ops.ts";
import { OP } from "../../src/protocol/ops.ts";

it("readSend() does not recognise a channel by bytes its caller has since overwritten", () => {
  const first = Buffer.from(encode([OP.SEND, 1, "a/v1/x", "p.1", encode("one")]));
  expect(readSend(first)?.channel).toBe("a/v1/x");
  // The caller reuses the buffer for the next frame: same length, another channel.
  first.set(encode([OP.SEND, 2, "b/v1/y", "p.2", encode("two")]));
  expect(readSend(first)?.channel).toBe("b/v1/y");
});

it("FrameDecoder keeps its own copy of a partial frame, so the caller may reuse the chunk", () => {
  const framed = (value: unknown) => {
    const body = encode(value);
    const out = Buffer.alloc(4 + body.length);
    out.writeUInt32BE(body.length, 0);
    out.set(body, 4);
    return out;
  };
  const frame = framed(["hello", "world"]);
  const chunk = Buffer.from(frame.subarray(0, 9));
  const decoder = new FrameDecoder();
  expect(decoder.push(chunk)).toEqual([]);
  chunk.fill(0xff); // reused by the next read
  const [whole] = decoder.push(frame.subarray(9));
  expect(Buffer.from(whole!)).toEqual(frame.subarray(4));
});
