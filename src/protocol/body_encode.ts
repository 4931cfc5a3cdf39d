/**
 * Encoding of message bodies, the one CBOR encode every send pays for (the counterpart of
 * body.ts, which decodes them).
 *
 * The generic encoder returns a new buffer for each body, which the SEND frame then copies.
 * Bodies are nearly always JSON-like (plain objects and arrays of strings, numbers, booleans and
 * null), and this writes those into one reused buffer: making, encoding and framing the
 * benchmark's 7-field send took 0.73–0.74 µs against 0.86–0.90 µs. Integers go in their
 * shortest form (-0 as 0, as the generic encoder does), other numbers as 64-bit floats,
 * text as UTF-8 (ASCII copied byte by byte), map and array heads in their shortest form.
 * Anything else anywhere in the value (undefined, Dates, Maps, typed arrays, class instances,
 * BigInts, a lone surrogate, deep nesting) hands the whole value to the generic encoder, so a
 * body is always what `encode()` gives or an encoding of the same JSON-like value that
 * `decode()` reads back equal (tests/protocol/body_encode_test.ts).
 */
import { encode } from "./cbor.ts";
import { writeHead, writeText } from "./frame.ts";

/** Nesting deeper than this is rare in bodies; the generic encoder handles it. */
const MAX_DEPTH = 64;
/** Thrown inside this writer to say "let the generic encoder do it". Never escapes. */
const FALLBACK = Symbol("fallback");

// The output, reused from one body to the next (module variables: the writer's hot state).
let buffer = new Uint8Array(4096);
let view = new DataView(buffer.buffer);
let at = 0;
/** Set while a body is written: a call from inside it (a getter) goes to the generic encoder. */
let encoding = false;

/**
 * The CBOR of `value`, as a view of a buffer reused by the next call: copy it (or write it into a
 * frame) before encoding another body. Throws what `encode()` throws for a value it cannot encode.
 */
export function encodeBody(value: unknown): Uint8Array {
  // A getter of the value that sends a message itself would write over this one's bytes.
  if (encoding) return encode(value);
  encoding = true;
  at = 0;
  try {
    write(value, 0);
  } catch (error) {
    if (error === FALLBACK) return encode(value);
    throw error;
  } finally {
    encoding = false;
  }
  return buffer.subarray(0, at);
}

function write(value: unknown, depth: number): void {
  switch (typeof value) {
    case "string":
      return writeString(value);
    case "number":
      reserve(9);
      if (!Number.isSafeInteger(value)) {
        buffer[at] = 0xfb;
        view.setFloat64(at + 1, value);
        at += 9;
      } else if (value >= 0) at = writeHead(buffer, at, 0, value);
      else at = writeHead(buffer, at, 1, -1 - value);
      return;
    case "boolean":
      reserve(1);
      buffer[at++] = value ? 0xf5 : 0xf4;
      return;
    case "object": {
      if (value === null) {
        reserve(1);
        buffer[at++] = 0xf6;
        return;
      }
      if (depth >= MAX_DEPTH) throw FALLBACK;
      if (Array.isArray(value)) {
        head(4, value.length);
        for (let i = 0; i < value.length; i++) write(value[i], depth + 1);
        return;
      }
      const prototype = Object.getPrototypeOf(value);
      if (prototype !== Object.prototype && prototype !== null) throw FALLBACK; // Date, Map, Uint8Array, class…
      return writeMap(value as Record<string, unknown>, depth);
    }
    default:
      throw FALLBACK; // undefined, bigint, symbol, function
  }
}

/**
 * One pass over the entries: a one-byte head is written for fewer than 24 (nearly every body)
 * and filled in once they are counted; with more, the entries move to make room for a longer one.
 */
function writeMap(object: Record<string, unknown>, depth: number): void {
  reserve(1);
  const start = at++;
  let count = 0;
  for (const key in object) {
    if (!Object.hasOwn(object, key)) continue;
    writeString(key);
    write(object[key], depth + 1);
    count++;
  }
  if (count < 24) {
    buffer[start] = 0xa0 | count;
    return;
  }
  const end = at;
  const shift = count < 0x100 ? 1 : count < 0x10000 ? 2 : 4;
  reserve(shift);
  buffer.copyWithin(start + 1 + shift, start + 1, end);
  writeHead(buffer, start, 5, count);
  at = end + shift;
}

function writeString(value: string): void {
  reserve(9 + value.length * 3);
  const end = writeText(buffer, at, value, true);
  // A lone surrogate has no UTF-8: the generic encoder's own form of it is kept.
  if (end < 0) throw FALLBACK;
  at = end;
}

function head(major: number, value: number): void {
  reserve(9);
  at = writeHead(buffer, at, major, value);
}

function reserve(extra: number): void {
  if (at + extra <= buffer.length) return;
  let size = buffer.length * 2;
  while (size < at + extra) size *= 2;
  const next = new Uint8Array(size);
  next.set(buffer.subarray(0, at));
  buffer = next;
  view = new DataView(buffer.buffer);
}
