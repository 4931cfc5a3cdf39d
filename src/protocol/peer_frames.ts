/**
 * Hand-written CBOR for the one peer operation every replicated message crosses: APPEND (master
 * → slave). The master writes each APPEND once, straight into a frame of its exact size (the
 * generic encoder's buffer, copy and framing copy cost about three times as much), and the same
 * bytes go to every slave and into the log tail. The bytes are plain CBOR: the generic decoder
 * reads them like any other frame. A slave reads them with `readAppend` (hot_ops.ts, with the
 * other hand-written readers).
 */
import { encode } from "./cbor.ts";
import { FRAME_HEADER_SIZE, frame } from "./frame.ts";
import { OP } from "./ops.ts";
import type { PeerDeadLetter } from "./peer_ops.ts";

/** The fields of an APPEND besides its op and index. */
export interface AppendFields {
  readonly id: string;
  readonly queue: string;
  readonly destination: string;
  readonly body: Uint8Array;
  readonly created: number;
  readonly deliveries?: number;
  readonly deadLetter?: PeerDeadLetter | null;
}

const textEncoder = new TextEncoder();

/** Bytes of a CBOR item head whose argument is `value` (RFC 8949 §3, shortest form). */
function headSize(value: number): number {
  return value < 24 ? 1 : value < 0x100 ? 2 : value < 0x10000 ? 3 : value < 0x100000000 ? 5 : 9;
}

/** A string as it is written: itself when ASCII (one byte per character), else its UTF-8 bytes. */
function utf8(value: string): string | Uint8Array {
  for (let i = 0; i < value.length; i++) if (value.charCodeAt(i) >= 0x80) return textEncoder.encode(value);
  return value;
}

const isUint = (value: number) => Number.isSafeInteger(value) && value >= 0;

/** `[APPEND, index, id, queue, destination, body, created, deliveries, deadLetter]` as one frame. */
export function appendFrame(index: number, message: AppendFields): Uint8Array {
  const deliveries = message.deliveries ?? 0;
  const created = message.created;
  const deadLetter = message.deadLetter ?? null;
  if (!isUint(index) || !isUint(created) || !isUint(deliveries)) {
    // Not what the writer below spells out: the generic encoder writes it (and the check refuses it).
    return frame(encode([OP.APPEND, index, message.id, message.queue, message.destination, message.body, created, deliveries, deadLetter]));
  }
  const id = utf8(message.id);
  const queue = utf8(message.queue);
  const destination = utf8(message.destination);
  const dead = deadLetter === null ? null : encode(deadLetter);
  const body = message.body;
  const size = 1 + headSize(OP.APPEND) + headSize(index) + textSize(id) + textSize(queue) + textSize(destination) +
    headSize(body.length) + body.length + headSize(created) + headSize(deliveries) + (dead === null ? 1 : dead.length);
  const out = new Uint8Array(FRAME_HEADER_SIZE + size);
  out[0] = size >>> 24;
  out[1] = (size >>> 16) & 0xff;
  out[2] = (size >>> 8) & 0xff;
  out[3] = size & 0xff;
  let at = FRAME_HEADER_SIZE;
  out[at++] = 0x89; // array of 9
  at = writeHead(out, at, 0, OP.APPEND);
  at = writeHead(out, at, 0, index);
  at = writeText(out, at, id);
  at = writeText(out, at, queue);
  at = writeText(out, at, destination);
  at = writeHead(out, at, 2, body.length);
  out.set(body, at);
  at += body.length;
  at = writeHead(out, at, 0, created);
  at = writeHead(out, at, 0, deliveries);
  if (dead === null) out[at++] = 0xf6; // null
  else {
    out.set(dead, at);
    at += dead.length;
  }
  return out;
}

function textSize(value: string | Uint8Array): number {
  return headSize(value.length) + value.length;
}

function writeText(out: Uint8Array, at: number, value: string | Uint8Array): number {
  at = writeHead(out, at, 3, value.length);
  if (typeof value !== "string") {
    out.set(value, at);
    return at + value.length;
  }
  for (let i = 0; i < value.length; i++) out[at++] = value.charCodeAt(i);
  return at;
}

function writeHead(out: Uint8Array, at: number, major: number, value: number): number {
  const type = major << 5;
  if (value < 24) {
    out[at++] = type | value;
  } else if (value < 0x100) {
    out[at++] = type | 24;
    out[at++] = value;
  } else if (value < 0x10000) {
    out[at++] = type | 25;
    out[at++] = value >>> 8;
    out[at++] = value & 0xff;
  } else if (value < 0x100000000) {
    out[at++] = type | 26;
    out[at++] = value >>> 24;
    out[at++] = (value >>> 16) & 0xff;
    out[at++] = (value >>> 8) & 0xff;
    out[at++] = value & 0xff;
  } else {
    out[at++] = type | 27;
    const high = Math.floor(value / 0x100000000);
    const low = value >>> 0;
    out[at++] = high >>> 24;
    out[at++] = (high >>> 16) & 0xff;
    out[at++] = (high >>> 8) & 0xff;
    out[at++] = high & 0xff;
    out[at++] = low >>> 24;
    out[at++] = (low >>> 16) & 0xff;
    out[at++] = (low >>> 8) & 0xff;
    out[at++] = low & 0xff;
  }
  return at;
}
