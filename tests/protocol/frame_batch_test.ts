/**
 * FrameBatch: the frames of a burst collected into one buffer, handed out with take() (views that
 * are never written again) or shown in place with view() and emptied with clear().
 */
import { describe, expect, it } from "bun:test";
import { decode, encode } from "../../src/protocol/cbor.ts";
import { frame, FRAME_HEADER_SIZE, FrameBatch, FrameDecoder } from "../../src/protocol/frame.ts";
import { textItem, writeSend } from "../../src/protocol/hot_ops.ts";
import { OP } from "../../src/protocol/ops.ts";
import { bytes, concat, copies } from "../helpers/frame_bytes.ts";
import { mulberry32 } from "../helpers/random.ts";

describe("FrameBatch", () => {
  it("FrameBatch.take() returns every pushed frame, decodable by FrameDecoder", () => {
    const batch = new FrameBatch();
    const bodies = [encode([OP.OK, [1, 2]]), new Uint8Array(0), encode([OP.PONG, 3]), bytes(100)];
    for (const body of bodies) batch.push(body);
    expect(batch.frameCount).toBe(4);
    expect(batch.byteLength).toBe(bodies.reduce((n, b) => n + FRAME_HEADER_SIZE + b.length, 0));
    const taken = batch.take();
    expect([...taken]).toEqual([...concat(...bodies.map(frame))]);
    expect(copies(new FrameDecoder().push(taken))).toEqual(copies(bodies));
  });

  it("FrameBatch.push() grows past its initial size and keeps earlier frames", () => {
    const batch = new FrameBatch(8);
    const bodies: Uint8Array[] = [];
    for (let i = 0; i < 100; i++) {
      const body = bytes(i % 50, i);
      bodies.push(body);
      batch.push(body);
    }
    const big = bytes(5000, 3); // more than twice the current size at once
    bodies.push(big);
    batch.push(big);
    expect(batch.frameCount).toBe(101);
    const taken = batch.take();
    expect(taken.length).toBe(bodies.reduce((n, b) => n + FRAME_HEADER_SIZE + b.length, 0));
    expect(copies(new FrameDecoder().push(taken))).toEqual(copies(bodies));
  });

  it("FrameBatch.view() shows the collected frames in place; clear() empties the batch for reuse", () => {
    const batch = new FrameBatch(16);
    for (let i = 0; i < 3; i++) batch.push(bytes(40_000, i)); // grows past SHRINK_ABOVE
    const first = batch.view();
    expect(first.length).toBe(batch.byteLength);
    expect(new FrameDecoder().push(first.slice())).toEqual([bytes(40_000, 0), bytes(40_000, 1), bytes(40_000, 2)]);
    // In place: every view is over the batch's one buffer, not a copy of it.
    const grown = first.buffer;
    expect(grown.byteLength).toBeGreaterThan(64 * 1024); // SHRINK_ABOVE
    expect(batch.view().buffer).toBe(grown);
    expect(batch.view().byteOffset).toBe(0);
    batch.clear();
    expect(batch.byteLength).toBe(0);
    expect(batch.frameCount).toBe(0);
    expect(batch.view().length).toBe(0);
    for (let round = 0; round < 20; round++) {
      batch.push(bytes(10, round)); // small bursts after a big one: the buffer shrinks, the bytes stay right
      // Kept while a window of 16 bursts holds the big one; at the end of the next (all small), down to 64 KiB at once.
      expect(batch.view().buffer.byteLength).toBe(round <= 30 ? grown.byteLength : 64 * 1024);
      expect(new FrameDecoder().push(batch.view().slice())).toEqual([bytes(10, round)]);
      batch.clear();
    }
  });

  it("FrameBatch keeps its buffer through bursts that alternate large and small, instead of shrinking and growing it back", () => {
    const batch = new FrameBatch(1024);
    batch.push(bytes(200_000, 0));
    const grown = batch.view().buffer;
    batch.clear();
    for (let round = 1; round <= 200; round++) {
      batch.push(bytes(round % 2 === 0 ? 200_000 : 1_000, round));
      expect(batch.view().buffer).toBe(grown);
      batch.clear();
    }
  });

  it("FrameBatch.take() hands out views of one buffer while it has room, and never writes what it handed out again", () => {
    const batch = new FrameBatch(64);
    const taken: Uint8Array[] = [];
    const sent: unknown[][] = [];
    const send = (ref: number, id: string) => {
      writeSend(batch, ref, textItem("q/v1/x"), textItem(id), bytes(8, ref));
      sent.push([OP.SEND, ref, "q/v1/x", id, bytes(8, ref)]);
      taken.push(batch.take());
    };
    send(1, "a");
    send(2, "b");
    // One buffer, one frame after the other: no copy of its own per frame.
    expect(taken[1]!.buffer).toBe(taken[0]!.buffer);
    expect(taken[1]!.byteOffset).toBe(taken[0]!.byteOffset + taken[0]!.length);
    const before = taken.map((view) => [...view]);
    // This frame is started in the first buffer and does not fit in what is left of it: what it
    // wrote so far moves to a new buffer of the initial size, and the frames taken stay as they were.
    send(3, "an id that takes the rest of the first buffer");
    expect(taken[2]!.buffer).not.toBe(taken[0]!.buffer);
    send(4, "d");
    expect(taken[3]!.buffer).toBe(taken[2]!.buffer);
    expect(taken.slice(0, 2).map((view) => [...view])).toEqual(before);
    expect(taken.map((view) => decode(new FrameDecoder().push(view)[0]!))).toEqual(sent);
    expect(batch.byteLength).toBe(0);
  });

  it("FrameBatch.take() empties the batch and hands out a buffer the caller owns", () => {
    const batch = new FrameBatch(16);
    batch.push(bytes(6, 1));
    const first = batch.take();
    const firstCopy = [...first];
    expect(batch.byteLength).toBe(0);
    expect(batch.frameCount).toBe(0);
    expect(batch.take().length).toBe(0);
    batch.push(bytes(6, 99));
    expect([...first]).toEqual(firstCopy); // not overwritten by the next batch
    const second = batch.take();
    expect(copies(new FrameDecoder().push(second))).toEqual([[...bytes(6, 99)]]);
  });
  it("FrameBatch, driven at random through every way of writing, taking and clearing, hands out exactly the frames written and never changes them", () => {
    const random = mulberry32(25);
    const size = (max: number) => Math.floor(random() * max);
    for (let round = 0; round < 20; round++) {
      const batch = new FrameBatch(1 + size(256));
      const taken: { view: Uint8Array; copy: number[]; bodies: number[][] }[] = [];
      let pending: number[][] = []; // bodies written since the last take or clear
      for (let step = 0; step < 300; step++) {
        const what = random();
        if (what < 0.3) {
          const body = bytes(size(random() < 0.1 ? 70_000 : 300), step);
          batch.push(body);
          pending.push([...body]);
        } else if (what < 0.45) {
          // Item by item: the frame may move to a new buffer halfway.
          const id = "i".repeat(size(400));
          const body = bytes(size(200), step);
          writeSend(batch, step, textItem("q/v1/x"), textItem(id), body);
          pending.push([...encode([OP.SEND, step, "q/v1/x", id, body])]);
        } else if (what < 0.55) {
          const body = bytes(size(100), step);
          batch.pushFramed(frame(body));
          pending.push([...body]);
        } else if (what < 0.85) {
          const view = batch.take();
          taken.push({ view, copy: [...view], bodies: pending });
          pending = [];
        } else if (what < 0.95) {
          expect(copies(new FrameDecoder().push(batch.view().slice()))).toEqual(pending);
          batch.clear();
          pending = [];
        } else {
          expect(copies(new FrameDecoder().push(batch.view().slice()))).toEqual(pending);
        }
        expect(batch.byteLength).toBe(pending.reduce((n, body) => n + FRAME_HEADER_SIZE + body.length, 0));
      }
      for (const { view, copy, bodies } of taken) {
        expect([...view]).toEqual(copy); // nothing written over what was handed out
        expect(copies(new FrameDecoder(1 << 20).push(view))).toEqual(bodies);
      }
    }
  });
});
