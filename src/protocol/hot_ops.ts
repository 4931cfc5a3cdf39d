/**
 * Hand-written CBOR for the two operations every message crosses: SEND (client → broker) and
 * DELIVER (broker → client). They are written straight into a FrameBatch, without the generic
 * encoder's intermediate buffer and copy: about 0.4 µs per DELIVER instead of 1 µs. The bytes are
 * plain CBOR that the generic decoder reads like any other frame. (Hand-written readers were
 * measured too and lost to cbor-x's decoder, so reading stays generic.)
 */
import type { FrameBatch } from "./frame.ts";
import { OP } from "./ops.ts";

/** Writes `[SEND, ref, channel, messageId, body]` as one frame. */
export function writeSend(batch: FrameBatch, ref: number, channel: string, messageId: string, body: Uint8Array): void {
  batch.beginFrame();
  batch.arrayHeader(5);
  batch.uint(OP.SEND);
  batch.uint(ref);
  batch.text(channel);
  batch.text(messageId);
  batch.bytes(body);
  batch.endFrame();
}

/** Writes `[DELIVER, sub, tag, messageId, destination, nbRequeues, body, created]` as one frame. */
export function writeDeliver(
  batch: FrameBatch,
  sub: number,
  tag: number,
  messageId: string,
  destination: string,
  nbRequeues: number,
  body: Uint8Array,
  created: number,
): void {
  batch.beginFrame();
  batch.arrayHeader(8);
  batch.uint(OP.DELIVER);
  batch.uint(sub);
  batch.uint(tag);
  batch.text(messageId);
  batch.text(destination);
  batch.uint(nbRequeues);
  batch.bytes(body);
  batch.uint(created);
  batch.endFrame();
}

/** Writes `[OK, [ref, …]]`, or `[OK, [ref, …], "slave"]` from a slave, as one frame. */
export function writeOk(batch: FrameBatch, refs: readonly number[], slave: boolean): void {
  batch.beginFrame();
  batch.arrayHeader(slave ? 3 : 2);
  batch.uint(OP.OK);
  batch.arrayHeader(refs.length);
  for (const ref of refs) batch.uint(ref);
  if (slave) batch.text("slave");
  batch.endFrame();
}
