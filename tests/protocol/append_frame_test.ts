/**
 * The hand-written APPEND (appendFrame, readAppend in hot_ops.ts) against the generic CBOR
 * encoder and decoder: the same values both ways, every size class of every head, and malformed
 * frames read as "not mine" (the generic path then gives the coded error), never as something else.
 */
import { describe, expect, it } from "bun:test";
import { decode, encode, FRAME_HEADER_SIZE, frame, FrameBatch, OP } from "../../src/protocol/mod.ts";
import { checkAppend } from "../../src/protocol/peer_ops.ts";
import { appendFrame, readAppend, writeAppend } from "../../src/protocol/hot_ops.ts";
import type { AppendFields } from "../../src/protocol/peer_ops.ts";
import { mulberry32 } from "../helpers/random.ts";

const generic = (index: number, m: AppendFields) =>
  frame(encode([OP.APPEND, index, m.id, m.queue, m.destination, m.body, m.created, m.deliveries ?? 0, m.deadLetter ?? null]));
const cbor = (framed: Uint8Array) => framed.subarray(FRAME_HEADER_SIZE);

function sample(random: () => number, n: number): [number, AppendFields] {
  const pick = <T>(values: T[]) => values[Math.floor(random() * values.length)]!;
  const sizes = [0, 1, 23, 24, 255, 256, 65_535, 65_536, 70_000];
  const numbers = [0, 23, 24, 255, 256, 65_535, 65_536, 2 ** 32 - 1, 2 ** 32, 1_764_806_400_123, Number.MAX_SAFE_INTEGER];
  const text = (length: number, unicode: boolean) =>
    Array.from({ length }, (_, i) => (unicode && i % 3 === 0 ? "é漢" : String.fromCharCode(97 + (i % 26)))).join("");
  const unicode = random() < 0.3;
  return [pick(numbers), {
    id: `${text(1 + Math.floor(random() * 40), unicode)}.${n}`,
    queue: pick(["orders/v1", "ñ/v2", text(300, unicode)]),
    destination: pick(["", "*", "eu-1", text(30, unicode)]),
    body: new Uint8Array(pick(sizes)).map((_, i) => (i * 31 + n) & 0xff),
    created: pick(numbers),
    deliveries: pick([0, 1, 24, 70_000]),
    deadLetter: random() < 0.2 ? { reason: "requeueLimit", channel: "orders/v1/x", messageId: "m.1", deliveries: 5 } : null,
  }];
}

describe("APPEND written by hand", () => {
  it("decodes with the generic decoder to what the generic encoder writes, and reads back with readAppend", () => {
    const random = mulberry32(7);
    for (let n = 0; n < 500; n++) {
      const [index, message] = sample(random, n);
      const mine = appendFrame(index, message);
      const theirs = generic(index, message);
      const expected = decode(cbor(theirs)) as unknown[];
      expect(decode(cbor(mine))).toEqual(expected);
      const length = new DataView(mine.buffer, mine.byteOffset).getUint32(0);
      expect(length).toBe(mine.length - FRAME_HEADER_SIZE);
      const read = readAppend(mine, FRAME_HEADER_SIZE, mine.length);
      expect(read).toEqual(checkAppend(expected));
    }
  });

  it("writes a queue move's MOVE_APPEND with the same fields, read back only as MOVE_APPEND", () => {
    const random = mulberry32(11);
    for (let n = 0; n < 200; n++) {
      const [index, message] = sample(random, n);
      const batch = new FrameBatch(64);
      writeAppend(batch, index, message, OP.MOVE_APPEND);
      const mine = batch.take();
      const theirs = frame(encode([OP.MOVE_APPEND, index, message.id, message.queue, message.destination, message.body, message.created, message.deliveries ?? 0, message.deadLetter ?? null]));
      const expected = decode(cbor(theirs)) as unknown[];
      expect(decode(cbor(mine))).toEqual(expected);
      expect(readAppend(mine, FRAME_HEADER_SIZE, mine.length, OP.MOVE_APPEND) as unknown[] | undefined).toEqual(expected);
      expect(readAppend(mine, FRAME_HEADER_SIZE, mine.length)).toBeUndefined(); // not an APPEND
    }
  });

  it("reads an APPEND in place, inside a larger chunk, and its body is a view of that chunk", () => {
    const first = appendFrame(5, { id: "a.1", queue: "q/v1", destination: "x", body: new Uint8Array([1, 2, 3]), created: 9 });
    const second = appendFrame(6, { id: "a.2", queue: "q/v1", destination: "x", body: new Uint8Array([4]), created: 9 });
    const chunk = new Uint8Array(first.length + second.length);
    chunk.set(first);
    chunk.set(second, first.length);
    const read = readAppend(chunk, first.length + FRAME_HEADER_SIZE, chunk.length)!;
    expect(read[1]).toBe(6);
    expect(read[2]).toBe("a.2");
    expect(read[5].buffer).toBe(chunk.buffer);
    expect([...read[5]]).toEqual([4]);
  });

  it("leaves to the generic path what it does not spell out, and never throws on a cut or damaged frame", () => {
    // A created time that is not an unsigned integer is written by the generic encoder; checkAppend takes it.
    const odd = appendFrame(1, { id: "m.1", queue: "q/v1", destination: "x", body: new Uint8Array(0), created: 1.5 });
    expect(readAppend(odd, FRAME_HEADER_SIZE, odd.length)).toBeUndefined();
    expect(checkAppend(decode(cbor(odd)) as unknown[])[6]).toBe(1.5);

    const valid = appendFrame(300, {
      id: "m.2",
      queue: "q/v1",
      destination: "x",
      body: new Uint8Array(40),
      created: 1_764_806_400_123,
      deadLetter: { reason: "ttl", channel: "q/v1/x", messageId: "m.0", deliveries: 1 },
    });
    const body = cbor(valid);
    for (let cut = 0; cut < body.length; cut++) {
      expect(readAppend(body.subarray(0, cut), 0, cut)).toBeUndefined();
    }
    const random = mulberry32(11);
    for (let n = 0; n < 2_000; n++) {
      const damaged = body.slice();
      damaged[Math.floor(random() * damaged.length)] = Math.floor(random() * 256);
      const read = readAppend(damaged, 0, damaged.length);
      // What it reads is what the generic decoder reads of the same bytes, with the same checks.
      if (read !== undefined) expect(read).toEqual(checkAppend(decode(damaged) as unknown[]));
    }
    const empty = appendFrame(1, { id: "m.3", queue: "q/v1", destination: "x", body: new Uint8Array(0), created: 0 });
    const emptyId = cbor(empty).slice();
    expect(readAppend(emptyId, 0, emptyId.length)).toBeDefined();
    emptyId[2] = 0x60; // the id becomes "" (and the frame no longer parses to its end)
    expect(readAppend(emptyId, 0, emptyId.length)).toBeUndefined();
  });
});
