import { describe, expect, it } from "bun:test";
import { decode, encode } from "../../src/protocol/cbor.ts";
import { type ErrorCode, KittenError } from "../../src/protocol/errors.ts";
import { frame, FRAME_HEADER_SIZE, FrameDecoder, MAX_FRAME_SIZE } from "../../src/protocol/frame.ts";
import {
  checkAck,
  checkHello,
  checkIds,
  checkNack,
  checkPing,
  checkSend,
  checkSubscribe,
  checkUnsubscribe,
  OP,
  opOf,
} from "../../src/protocol/ops.ts";
import { bytes, concat, copies } from "../helpers/frame_bytes.ts";
import { mulberry32 } from "../helpers/random.ts";
import { thrown } from "../helpers/errors.ts";

function header(length: number): Uint8Array {
  return new Uint8Array([length >>> 24, (length >>> 16) & 0xff, (length >>> 8) & 0xff, length & 0xff]);
}

const BODIES = [
  encode([OP.HELLO, 1, { client: "svc", token: null }]),
  new Uint8Array(0),
  encode([OP.SEND, 1, "e/v1/1", "m-1", bytes(300)]),
  bytes(1, 9),
  encode([OP.ACK, 3, [1, 2, 3]]),
];
const STREAM = concat(...BODIES.map(frame));
const EXPECTED = copies(BODIES);

describe("frame", () => {
  it("frame() prefixes the body with its 4-byte big-endian length", () => {
    const framed = frame(bytes(300));
    expect(framed.length).toBe(FRAME_HEADER_SIZE + 300);
    expect([...framed.subarray(0, 4)]).toEqual([0, 0, 1, 44]);
    expect([...framed.subarray(4)]).toEqual([...bytes(300)]);
    expect([...frame(new Uint8Array(0))]).toEqual([0, 0, 0, 0]);
  });

  it("FrameDecoder uses MAX_FRAME_SIZE (1 MiB) unless told otherwise", () => {
    expect(MAX_FRAME_SIZE).toBe(1024 * 1024);
    expect(new FrameDecoder().maxFrameSize).toBe(MAX_FRAME_SIZE);
    expect(new FrameDecoder(10).maxFrameSize).toBe(10);
  });

  it("FrameDecoder.push() returns a single frame", () => {
    const decoder = new FrameDecoder();
    const body = encode([OP.PING, 7]);
    const frames = decoder.push(frame(body));
    expect(copies(frames)).toEqual([[...body]]);
    expect(decode(frames[0]!)).toEqual([OP.PING, 7]);
    expect(decoder.pendingBytes).toBe(0);
  });

  it("FrameDecoder.push() returns every frame of one chunk in order", () => {
    const decoder = new FrameDecoder();
    expect(copies(decoder.push(STREAM))).toEqual(EXPECTED);
    expect(decoder.pendingBytes).toBe(0);
  });

  it("FrameDecoder.push() returns every frame of a stream fed in 1-byte chunks", () => {
    const decoder = new FrameDecoder();
    const frames: Uint8Array[] = [];
    for (let i = 0; i < STREAM.length; i++) {
      const chunk = STREAM.slice(i, i + 1);
      const got = decoder.push(chunk);
      expect(got.length).toBeLessThanOrEqual(2); // an empty frame can complete right after another
      frames.push(...got.map((f) => f.slice()));
    }
    expect(copies(frames)).toEqual(EXPECTED);
    expect(decoder.pendingBytes).toBe(0);
  });

  it("FrameDecoder.push() gives identical bodies at every split point of two frames", () => {
    const first = encode([OP.SEND, 1, "e/v1/1", "m-1", bytes(40)]);
    const second = encode([OP.NACK, 2, 3, 1.5]);
    const stream = concat(frame(first), frame(second));
    for (let at = 0; at <= stream.length; at++) {
      const decoder = new FrameDecoder();
      const head = decoder.push(stream.slice(0, at)).map((f) => f.slice());
      const tail = decoder.push(stream.slice(at)).map((f) => f.slice());
      expect(copies([...head, ...tail])).toEqual([[...first], [...second]]);
      expect(decoder.pendingBytes).toBe(0);
    }
  });

  it("FrameDecoder.push() returns a frame split across three chunks", () => {
    const body = bytes(20, 3);
    const framed = frame(body);
    const decoder = new FrameDecoder();
    expect(decoder.push(framed.slice(0, 2))).toEqual([]); // half the header
    expect(decoder.push(framed.slice(2, 10))).toEqual([]); // rest of the header, some body
    expect(copies(decoder.push(framed.slice(10)))).toEqual([[...body]]);
  });

  it("FrameDecoder.push() waits for a header split across chunks", () => {
    const body = bytes(5);
    const framed = frame(body);
    const decoder = new FrameDecoder();
    expect(decoder.push(framed.slice(0, 1))).toEqual([]);
    expect(decoder.pendingBytes).toBe(1);
    expect(decoder.push(framed.slice(1, 3))).toEqual([]);
    expect(decoder.pendingBytes).toBe(3);
    expect(decoder.push(framed.slice(3, 4))).toEqual([]);
    expect(decoder.pendingBytes).toBe(4);
    expect(copies(decoder.push(framed.slice(4)))).toEqual([[...body]]);
    expect(decoder.pendingBytes).toBe(0);
  });

  it("FrameDecoder.push() returns zero-length bodies", () => {
    const decoder = new FrameDecoder();
    const empty = frame(new Uint8Array(0));
    const frames = decoder.push(concat(empty, empty, frame(bytes(2)), empty));
    expect(copies(frames)).toEqual([[], [], [...bytes(2)], []]);
    expect(copies(decoder.push(empty))).toEqual([[]]);
    expect(decoder.pendingBytes).toBe(0);
  });

  it("FrameDecoder.push() accepts a body of exactly maxFrameSize", () => {
    const small = new FrameDecoder(1000);
    expect(small.push(frame(bytes(1000)))[0]!.length).toBe(1000);
    const decoder = new FrameDecoder();
    const body = bytes(MAX_FRAME_SIZE, 5);
    const frames = decoder.push(frame(body));
    expect(frames.length).toBe(1);
    expect(frames[0]!.length).toBe(MAX_FRAME_SIZE);
    expect(frames[0]![MAX_FRAME_SIZE - 1]).toBe(body[MAX_FRAME_SIZE - 1]!);
  });

  it("FrameDecoder.push() throws FRAME_TOO_LARGE for maxFrameSize + 1 from the header alone", () => {
    const error = thrown(() => new FrameDecoder(1000).push(header(1001)));
    expect(error.code).toBe("FRAME_TOO_LARGE");
    expect(error.message).toContain("1001");
    expect(error.message).toContain("1000");
    expect(thrown(() => new FrameDecoder().push(header(MAX_FRAME_SIZE + 1))).code).toBe("FRAME_TOO_LARGE");
    // The header itself split across two chunks: refused as soon as its fourth byte arrives.
    const split = new FrameDecoder(1000);
    expect(split.push(header(1001).slice(0, 2))).toEqual([]);
    expect(thrown(() => split.push(header(1001).slice(2))).code).toBe("FRAME_TOO_LARGE");
  });

  it("FrameDecoder.push() throws FRAME_TOO_LARGE for an oversized header after complete frames", () => {
    const decoder = new FrameDecoder(100);
    expect(thrown(() => decoder.push(concat(frame(bytes(10)), header(101)))).code).toBe("FRAME_TOO_LARGE");
  });

  it("FrameDecoder.each() visits every frame in place, in order, across chunk boundaries", () => {
    const stream = concat(frame(bytes(10, 1)), frame(bytes(0)), frame(bytes(300, 2)), frame(bytes(5, 3)));
    for (const cut of [1, 4, 9, 14, 15, 100, stream.length - 1]) {
      const decoder = new FrameDecoder();
      const seen: number[][] = [];
      for (const chunk of [stream.subarray(0, cut), stream.subarray(cut)]) {
        decoder.each(chunk, (data, start, end) => {
          seen.push([...data.subarray(start, end)]);
          return true;
        });
      }
      expect(seen).toEqual([[...bytes(10, 1)], [], [...bytes(300, 2)], [...bytes(5, 3)]]);
    }
  });

  it("FrameDecoder.each() stops when the visitor returns false, and throws after the frames before an oversized header", () => {
    const decoder = new FrameDecoder(100);
    let visits = 0;
    decoder.each(concat(frame(bytes(3)), frame(bytes(4)), frame(bytes(5))), () => ++visits < 2);
    expect(visits).toBe(2);
    const before: number[] = [];
    const error = thrown(() =>
      new FrameDecoder(100).each(concat(frame(bytes(10)), header(101)), (_data, start, end) => {
        before.push(end - start);
        return true;
      })
    );
    expect(error.code).toBe("FRAME_TOO_LARGE");
    expect(before).toEqual([10]);
  });

  it("FrameDecoder.each() keeps the frames after one whose visitor threw, for the next call", () => {
    const decoder = new FrameDecoder();
    const failure = new Error("handler failed");
    expect(() =>
      decoder.each(concat(frame(bytes(3, 1)), frame(bytes(4, 2)), frame(bytes(5, 3)).subarray(0, 6)), () => {
        throw failure;
      })
    ).toThrow(failure);
    const seen: number[][] = [];
    decoder.each(frame(bytes(5, 3)).subarray(6), (data, start, end) => {
      seen.push([...data.subarray(start, end)]);
      return true;
    });
    expect(seen).toEqual([[...bytes(4, 2)], [...bytes(5, 3)]]);
  });

  it("FrameDecoder.push() reads a 0xFFFFFFFF length as unsigned and throws FRAME_TOO_LARGE", () => {
    const error = thrown(() => new FrameDecoder().push(new Uint8Array([0xff, 0xff, 0xff, 0xff])));
    expect(error.code).toBe("FRAME_TOO_LARGE");
    expect(error.message).toContain("4294967295");
    const high = thrown(() => new FrameDecoder(2 ** 31).push(new Uint8Array([0x80, 0, 0, 1])));
    expect(high.message).toContain(String(2 ** 31 + 1));
  });

  it("FrameDecoder.push() returns views into the chunk when nothing is pending", () => {
    const decoder = new FrameDecoder();
    const chunk = concat(frame(bytes(10)), frame(bytes(20, 1)));
    const frames = decoder.push(chunk);
    expect(frames.length).toBe(2);
    expect(frames[0]!.buffer).toBe(chunk.buffer);
    expect(frames[1]!.buffer).toBe(chunk.buffer);
    expect(frames[0]!.byteOffset).toBe(chunk.byteOffset + 4);
    expect(frames[1]!.byteOffset).toBe(chunk.byteOffset + 18);
    chunk[4] = 0xee; // a view sees later writes to the chunk
    expect(frames[0]![0]).toBe(0xee);
  });

  it("FrameDecoder.push() copies a pending tail, so later writes to the chunk do not change it", () => {
    const second = bytes(30, 11);
    const stream = concat(frame(bytes(10)), frame(second));
    const decoder = new FrameDecoder();
    const chunk = stream.slice(0, 20); // first frame and 6 bytes of the second
    expect(decoder.push(chunk).length).toBe(1);
    expect(decoder.pendingBytes).toBe(6);
    chunk.fill(0xee); // the socket reuses its buffer
    const frames = decoder.push(stream.slice(20));
    expect(copies(frames)).toEqual([[...second]]);
    expect(frames[0]!.buffer).not.toBe(chunk.buffer);
  });

  it("FrameDecoder.pendingBytes counts the bytes buffered towards the next frame", () => {
    const decoder = new FrameDecoder();
    expect(decoder.pendingBytes).toBe(0);
    const framed = frame(bytes(100));
    decoder.push(framed.slice(0, 2));
    expect(decoder.pendingBytes).toBe(2);
    decoder.push(framed.slice(2, 50));
    expect(decoder.pendingBytes).toBe(50);
    decoder.push(framed.slice(50, 103));
    expect(decoder.pendingBytes).toBe(103);
    expect(decoder.push(concat(framed.slice(103), framed.slice(0, 7))).length).toBe(1);
    expect(decoder.pendingBytes).toBe(7);
  });

  it("FrameDecoder.push() reassembles a large frame fed in 1-byte chunks in linear time", () => {
    // A peer that trickles a large frame must not make each byte cost a copy of everything
    // received so far (quadratic: ~3.4e10 byte copies here, which would time the test out).
    const size = 256 * 1024;
    const body = bytes(size, 1);
    const framed = frame(body);
    const decoder = new FrameDecoder(size);
    let frames: Uint8Array[] = [];
    for (let i = 0; i < framed.length; i++) {
      frames = decoder.push(framed.subarray(i, i + 1));
      if (i < framed.length - 1) expect(frames.length).toBe(0);
    }
    expect(frames.length).toBe(1);
    expect(frames[0]!.length).toBe(size);
    expect(Buffer.compare(frames[0]!, body)).toBe(0);
    expect(decoder.pendingBytes).toBe(0);
  });

  it("FrameDecoder.push(), decode() and opOf() let only coded errors escape random input", () => {
    const random = mulberry32(0x6b697474);
    const int = (n: number) => Math.floor(random() * n);
    const randomBytes = (n: number) => {
      const out = new Uint8Array(n);
      for (let i = 0; i < n; i++) out[i] = int(256);
      return out;
    };
    const valid = [
      encode([OP.HELLO, 1, { client: "svc", token: null }]),
      encode([OP.SEND, 1, "e/v1/1", "m-1", bytes(12)]),
      encode([OP.CONSUME, 2, 3, "e", "v1", ["1", "*"], 4]),
      encode([OP.LISTEN, 2, 3, "e", "v1", ["1"]]),
      encode([OP.ADD_ID, 4, 3, ["2"]]),
      encode([OP.REMOVE_ID, 4, 3, ["2"]]),
      encode([OP.UNSUBSCRIBE, 5, 3]),
      encode([OP.ACK, 3, [1, 2]]),
      encode([OP.NACK, 3, 1, 2.5]),
      encode([OP.PING, 6]),
    ];
    const probe = encode([OP.SEND, 9, "e/v1/1", "m-9", bytes(5)]);
    const probeValue = decode(probe);
    /** Validation as the broker dispatches it. */
    const check = (value: unknown[], op: number) => {
      switch (op) {
        case OP.HELLO:
          return checkHello(value);
        case OP.SEND:
          return checkSend(value);
        case OP.LISTEN:
        case OP.CONSUME:
          return checkSubscribe(value);
        case OP.ADD_ID:
        case OP.REMOVE_ID:
          return checkIds(value);
        case OP.UNSUBSCRIBE:
          return checkUnsubscribe(value);
        case OP.ACK:
          return checkAck(value);
        case OP.NACK:
          return checkNack(value);
        case OP.PING:
          return checkPing(value);
      }
    };
    /** One input: random bytes, or frames with valid headers around random or mutated bodies. */
    const input = (): Uint8Array => {
      const kind = int(4);
      if (kind === 0) return randomBytes(int(64));
      const parts: Uint8Array[] = [];
      for (let n = 1 + int(4); n > 0; n--) {
        let body: Uint8Array;
        if (kind === 1) body = randomBytes(int(48));
        else {
          body = valid[int(valid.length)]!.slice();
          if (kind === 2) {
            for (let flips = 1 + int(3); flips > 0; flips--) body[int(body.length)] = int(256);
            if (int(4) === 0) body = body.subarray(0, int(body.length + 1));
          }
        }
        parts.push(frame(body));
      }
      if (int(8) === 0) parts.push(randomBytes(1 + int(8))); // trailing garbage, often a huge length
      return concat(...parts);
    };

    const seen = new Map<string, number>();
    const count = (what: string) => seen.set(what, (seen.get(what) ?? 0) + 1);
    const allowed = new Set<ErrorCode>(["BAD_FRAME", "BAD_REQUEST"]);
    const started = performance.now();
    for (let iteration = 0; iteration < 50_000; iteration++) {
      const stream = input();
      const decoder = new FrameDecoder(256);
      try {
        for (let offset = 0; offset < stream.length;) {
          const size = int(3) === 0 ? stream.length : 1 + int(16);
          const frames = decoder.push(stream.subarray(offset, offset + size));
          offset += size;
          for (const body of frames) {
            count("frame");
            let value: unknown;
            try {
              value = decode(body);
            } catch (error) {
              // The broker wraps these into BAD_FRAME; they must be Errors with a message.
              expect(error).toBeInstanceOf(Error);
              expect(error).not.toBeInstanceOf(KittenError);
              expect(typeof (error as Error).message).toBe("string");
              count("decode error");
              continue;
            }
            try {
              const op = opOf(value);
              check(value as unknown[], op);
              count("valid");
            } catch (error) {
              if (!(error instanceof KittenError)) throw error;
              const op = Array.isArray(value) ? value[0] : undefined;
              const ok = allowed.has(error.code) || (error.code === "BAD_PROTOCOL" && op === OP.HELLO);
              if (!ok) throw new Error(`unexpected ${error.code}: ${error.message}`);
              count(error.code);
            }
          }
        }
      } catch (error) {
        if (!(error instanceof KittenError) || error.code !== "FRAME_TOO_LARGE") throw error;
        count("FRAME_TOO_LARGE");
      }
      // Failures leave no state behind in the shared CBOR decoder.
      if (iteration % 1000 === 0) expect(decode(probe)).toEqual(probeValue);
    }
    // Every path was taken, and the loop did not hang (a generous bound: speed is the benchmark's).
    const paths = ["frame", "decode error", "valid", "BAD_FRAME", "BAD_REQUEST", "BAD_PROTOCOL", "FRAME_TOO_LARGE"];
    for (const what of paths) expect(seen.get(what) ?? 0).toBeGreaterThan(0);
    expect(performance.now() - started).toBeLessThan(60_000);
  });
});
