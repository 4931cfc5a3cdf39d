/**
 * Hand-written CBOR for the operations every message crosses: SEND (client → broker), DELIVER
 * (broker → client) and APPEND (master → slave). They are written straight into a FrameBatch,
 * without the generic encoder's intermediate buffer and copy: about 0.4 µs per DELIVER instead of
 * 1 µs. The bytes are plain CBOR that the generic decoder reads like any other frame. The client
 * reads DELIVER with `readDeliver`, the broker reads SEND with `readSend` and a slave APPEND with
 * `readAppend`: their gain is less the parsing than reusing the strings that repeat from one frame
 * to the next (destination, channel, queue, the sender's id prefix); anything they do not expect
 * goes to the generic decoder.
 */
import { copyBytes, decodeText, equalsAt, readAscii } from "./bytes.ts";
import { decode, encode } from "./cbor.ts";
import { FrameBatch, frame, writeText } from "./frame.ts";
import { type DeadLetterInfo, MAX_MESSAGE_ID_LENGTH, OP } from "./ops.ts";
import type { AppendFields, AppendOp } from "./peer_ops.ts";

/**
 * Writes `[SEND, ref, channel, messageId, body]` as one frame. The channel and the message id come
 * as CBOR text items (`textItem`): a client encodes each channel once, and writes each id's counter
 * in place (client/send_frames.ts), instead of making and encoding two strings per send.
 */
export function writeSend(batch: FrameBatch, ref: number, channel: Uint8Array, messageId: Uint8Array, body: Uint8Array): void {
  batch.beginFrame();
  batch.arrayHeader(5);
  batch.uint(OP.SEND);
  batch.uint(ref);
  batch.encoded(channel);
  batch.encoded(messageId);
  batch.bytes(body);
  batch.endFrame();
}

/** `value` as a CBOR text item (head and UTF-8 bytes). */
export function textItem(value: string): Uint8Array {
  const item = new Uint8Array(9 + value.length * 3);
  return item.slice(0, writeText(item, 0, value));
}

/**
 * Writes `[APPEND, index, id, queue, destination, body, created, deliveries, deadLetter]` as one
 * frame; a queue move's MOVE_APPEND (`op`) has the same fields.
 */
export function writeAppend(batch: FrameBatch, index: number, message: AppendFields, op: number = OP.APPEND): void {
  const deadLetter = message.deadLetter ?? null;
  batch.beginFrame();
  batch.arrayHeader(9);
  batch.uint(op);
  batch.uint(index);
  batch.text(message.id);
  batch.text(message.queue);
  batch.text(message.destination);
  batch.bytes(message.body);
  batch.uint(message.created);
  batch.uint(message.deliveries ?? 0);
  batch.encoded(deadLetter === null ? CBOR_NULL : encode(deadLetter));
  batch.endFrame();
}

const CBOR_NULL = new Uint8Array([0xf6]);
/** Where `appendFrameView` writes each APPEND. */
const appendScratch = new FrameBatch(4 * 1024);

/**
 * The APPEND of a message as a frame of its own (a copy of `appendFrameView`'s bytes): what a
 * snapshot sends a slave, entry by entry.
 */
export function appendFrame(index: number, message: AppendFields): Uint8Array {
  return appendFrameView(index, message).slice();
}

/**
 * The APPEND of a message, as a view of a scratch buffer valid only until the next APPEND is
 * written: a master writes it once, into its log tail, and that copy goes to every slave. A
 * created time or count that is not an unsigned integer (never one this broker made) is written
 * by the generic encoder, and the slave's check refuses it.
 */
export function appendFrameView(index: number, message: AppendFields): Uint8Array {
  if (!writesByHand(index, message)) {
    const { id, queue, destination, body, created, deliveries, deadLetter } = message;
    return frame(encode([OP.APPEND, index, id, queue, destination, body, created, deliveries ?? 0, deadLetter ?? null]));
  }
  appendScratch.clear();
  writeAppend(appendScratch, index, message);
  return appendScratch.view();
}

/** True when `writeAppend` can write the entry: its index, created time and count are unsigned integers. */
export function writesByHand(index: number, message: AppendFields): boolean {
  return isCount(index) && isCount(message.created) && isCount(message.deliveries ?? 0);
}

/**
 * Writes `[DELIVER, sub, tag, messageId, destination, nbRequeues, body, created]` as one frame,
 * with a 9th element, `deadLetter`, for a message of a dead-letter queue.
 */
export function writeDeliver(
  batch: FrameBatch,
  sub: number,
  tag: number,
  messageId: string,
  destination: string,
  nbRequeues: number,
  body: Uint8Array,
  created: number,
  deadLetter: DeadLetterInfo | null = null,
): void {
  batch.beginFrame();
  batch.arrayHeader(deadLetter === null ? 8 : 9);
  batch.uint(OP.DELIVER);
  batch.uint(sub);
  batch.uint(tag);
  batch.text(messageId);
  batch.text(destination);
  batch.uint(nbRequeues);
  batch.bytes(body);
  batch.uint(created);
  if (deadLetter !== null) batch.encoded(encode(deadLetter));
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

/** A DELIVER frame read without the generic decoder. */
export interface DeliverFields {
  sub: number;
  tag: number;
  messageId: string;
  destination: string;
  nbRequeues: number;
  body: Uint8Array;
  created: number;
  /** Set for a message of a dead-letter queue: where it came from. */
  deadLetter?: DeadLetterInfo;
}


/**
 * A string that tends to repeat from one frame to the next (a destination, a channel, a sender's
 * prefix of message ids `<prefix>.<counter>`): decoded once, then recognised by its bytes, which
 * is cheaper than decoding it again (string decoding was a quarter of a listener's CPU).
 */
class RepeatedText {
  #bytes = new Uint8Array(0);
  #value = "";

  /** The text of `data[start, end)`; undefined when those bytes are not UTF-8. */
  read(start: number, end: number): string | undefined {
    if (equalsAt(this.#bytes, data, start, end)) return this.#value;
    const value = decodeText(data.subarray(start, end));
    if (value === undefined) return undefined;
    this.#bytes = copyBytes(data, start, end); // the frame's buffer is not ours to keep
    this.#value = value;
    return value;
  }
}

const destinations = new RepeatedText();
const channels = new RepeatedText();
const idPrefixes = new RepeatedText();

/**
 * The frame being read: `data[at, limit)`. Module state rather than a cursor object, so a read
 * allocates nothing but its result; the readers are synchronous and never re-entered.
 */
let data: Uint8Array = new Uint8Array(0);
let at = 0;
let limit = 0;

function begin(frame: Uint8Array, start: number, end: number): void {
  data = frame;
  at = start;
  limit = end;
}

/**
 * Reads the DELIVER frame that `writeDeliver` writes, from `frame[start, end)` (a frame inside a
 * larger chunk is read in place); a dead letter's 9th element is read by the generic decoder.
 * Returns undefined for anything else (another encoder's choices, a malformed frame), and the
 * caller then uses the generic decoder. Every read is bounds-checked; nothing here throws.
 */
export function readDeliver(frame: Uint8Array, start = 0, end = frame.length): DeliverFields | undefined {
  const header = frame[start];
  if (end - start < 3 || (header !== 0x88 && header !== 0x89) || frame[start + 1] !== 0x18 || frame[start + 2] !== OP.DELIVER) {
    return undefined;
  }
  begin(frame, start + 3, end);
  const sub = readHead(0);
  const tag = readHead(0);
  const idLength = readHead(3);
  if (sub < 0 || tag < 0 || idLength < 0 || at + idLength > limit) return undefined;
  const messageId = decodeMessageId(at, at += idLength);
  const destinationLength = readHead(3);
  if (messageId === undefined || destinationLength < 0 || at + destinationLength > limit) return undefined;
  const destination = destinations.read(at, at += destinationLength);
  if (destination === undefined) return undefined;
  const nbRequeues = readHead(0);
  const bodyLength = readHead(2);
  if (nbRequeues < 0 || bodyLength < 0 || at + bodyLength > limit) return undefined;
  const body = frame.subarray(at, at += bodyLength);
  const created = readHead(0);
  if (created < 0) return undefined;
  if (header === 0x88) return at === limit ? { sub, tag, messageId, destination, nbRequeues, body, created } : undefined;
  const deadLetter = readDeadLetter(frame.subarray(at, limit));
  return deadLetter === undefined ? undefined : { sub, tag, messageId, destination, nbRequeues, body, created, deadLetter };
}

/** The 9th element of a dead letter's DELIVER: a map of four fields, or undefined when it is not. */
function readDeadLetter(bytes: Uint8Array): DeadLetterInfo | undefined {
  let value: unknown;
  try {
    value = decode(bytes);
  } catch {
    return undefined;
  }
  const info = value as DeadLetterInfo | null;
  if (typeof info !== "object" || info === null) return undefined;
  const valid = typeof info.channel === "string" && typeof info.messageId === "string" && typeof info.deliveries === "number" &&
    (info.reason === "requeueLimit" || info.reason === "overflow" || info.reason === "ttl");
  return valid ? { reason: info.reason, channel: info.channel, messageId: info.messageId, deliveries: info.deliveries } : undefined;
}

/**
 * A DELIVER frame the generic decoder read (one `readDeliver` did not expect): its fields, or
 * undefined when they are not those of a delivery. Elements after the 9th are ignored, so that a
 * newer broker may add some.
 */
export function deliverFields(value: unknown[]): DeliverFields | undefined {
  const [op, sub, tag, messageId, destination, nbRequeues, body, created, deadLetter] = value;
  if (op !== OP.DELIVER || !isCount(sub) || !isCount(tag) || !isCount(nbRequeues) || !isCount(created)) return undefined;
  if (typeof messageId !== "string" || typeof destination !== "string" || !(body instanceof Uint8Array)) return undefined;
  const fields: DeliverFields = { sub, tag, messageId, destination, nbRequeues, body, created };
  if (deadLetter !== undefined && deadLetter !== null) {
    const info = deadLetter as Partial<DeadLetterInfo>;
    if (typeof info !== "object" || typeof info.reason !== "string" || typeof info.channel !== "string") return undefined;
    fields.deadLetter = info as DeadLetterInfo;
  }
  return fields;
}

function isCount(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

/**
 * The operation of a frame `[op, …]` (any array head, definite or not, then an unsigned op), read
 * without decoding it; -1 when the frame does not start that way (the generic decoder then names
 * what is wrong).
 */
export function peekOp(frame: Uint8Array, start = 0, end = frame.length): number {
  if (start >= end) return -1;
  begin(frame, start, end);
  const first = frame[start]!;
  if (first === 0x9f) at++; // indefinite-length array
  else if (readHead(4) < 1) return -1;
  return readHead(0);
}

/** A SEND frame read without the generic decoder. */
export interface SendFields {
  ref: number;
  channel: string;
  messageId: string;
  body: Uint8Array;
}

/**
 * Reads the 5-element SEND frame that `writeSend` writes, from `frame[start, end)`, with the
 * checks of `checkSend`. Returns undefined for anything else or anything `checkSend` would refuse:
 * the caller then takes the generic path, which gives the coded error. Nothing here throws.
 */
export function readSend(frame: Uint8Array, start = 0, end = frame.length): SendFields | undefined {
  if (end - start < 2 || frame[start] !== 0x85 || frame[start + 1] !== OP.SEND) return undefined;
  begin(frame, start + 2, end);
  const ref = readHead(0);
  const channelLength = readHead(3);
  if (ref < 0 || channelLength < 0 || at + channelLength > limit) return undefined;
  const channel = channels.read(at, at += channelLength);
  if (channel === undefined) return undefined;
  const idLength = readHead(3);
  if (idLength < 0 || at + idLength > limit) return undefined;
  const messageId = decodeMessageId(at, at += idLength);
  if (messageId === undefined || messageId.length === 0 || messageId.length > MAX_MESSAGE_ID_LENGTH) return undefined;
  const bodyLength = readHead(2);
  if (bodyLength < 0 || at + bodyLength !== limit) return undefined;
  return { ref, channel, messageId, body: frame.subarray(at, limit) };
}

/**
 * The message id in `data[start, end)`: ASCII read in one call where the runtime can; else a
 * repeated prefix is reused, and only the counter is decoded.
 */
function decodeMessageId(start: number, end: number): string | undefined {
  const ascii = readAscii(data, start, end);
  if (ascii !== undefined) return ascii;
  let dot = end - 1;
  while (dot >= start && data[dot] !== 0x2e && end - dot <= 11) dot--;
  if (dot <= start || data[dot] !== 0x2e) return decodeText(data.subarray(start, end));
  let counter = "";
  for (let i = dot + 1; i < end; i++) {
    const byte = data[i]!;
    if (byte >= 0x80) return decodeText(data.subarray(start, end));
    counter += String.fromCharCode(byte);
  }
  const prefix = idPrefixes.read(start, dot + 1);
  return prefix === undefined ? undefined : prefix + counter;
}

const queues = new RepeatedText();

/**
 * Reads an APPEND frame (or a MOVE_APPEND: `op`) as `writeAppend` writes it, from
 * `frame[start, end)`, with the checks of `checkAppend`; the body is a view of `frame`. Returns
 * undefined for anything else, and the caller then takes the generic path, which gives the coded
 * error. Nothing here throws.
 */
export function readAppend(frame: Uint8Array, start: number, end: number, op: number = OP.APPEND): AppendOp | undefined {
  if (end - start < 2 || frame[start] !== 0x89) return undefined;
  begin(frame, start + 1, end);
  if (readHead(0) !== op) return undefined;
  const index = readHead(0);
  if (index < 0) return undefined;
  const idLength = readHead(3);
  if (idLength <= 0 || at + idLength > limit) return undefined;
  const id = decodeMessageId(at, at += idLength);
  const queueLength = readHead(3);
  if (id === undefined || queueLength < 0 || at + queueLength > limit) return undefined;
  const queue = queues.read(at, at += queueLength);
  const destinationLength = readHead(3);
  if (queue === undefined || destinationLength < 0 || at + destinationLength > limit) return undefined;
  const destination = destinations.read(at, at += destinationLength);
  const bodyLength = readHead(2);
  if (destination === undefined || bodyLength < 0 || at + bodyLength > limit) return undefined;
  const body = data.subarray(at, at += bodyLength);
  const created = readHead(0);
  const deliveries = created < 0 ? -1 : readHead(0);
  if (deliveries < 0 || at >= limit) return undefined;
  let deadLetter: DeadLetterInfo | null = null;
  if (data[at] !== 0xf6 || at + 1 !== limit) {
    deadLetter = readDeadLetter(data.subarray(at, limit)) ?? null;
    if (deadLetter === null) return undefined;
  }
  return [op, index, id, queue, destination, body, created, deliveries, deadLetter] as AppendOp;
}

/** The argument of the CBOR item head at `at`, of major type `major`, or -1. */
function readHead(major: number): number {
  if (at >= limit) return -1;
  const initial = data[at++]!;
  if (initial >> 5 !== major) return -1;
  const info = initial & 0x1f;
  if (info < 24) return info;
  const size = info === 24 ? 1 : info === 25 ? 2 : info === 26 ? 4 : info === 27 ? 8 : 0;
  if (size === 0 || at + size > limit) return -1;
  let value = 0;
  for (let i = 0; i < size; i++) value = value * 256 + data[at + i]!;
  at += size;
  return Number.isSafeInteger(value) ? value : -1;
}
