/**
 * Framing: every frame is a 4-byte big-endian length followed by that many bytes of CBOR.
 *
 * `FrameDecoder` reassembles frames from a byte stream. The length is checked against the
 * maximum **before** anything is allocated, so a hostile peer cannot make us reserve memory
 * with a large prefix. With nothing pending, complete frames are returned as views into the
 * chunk (no copy); only a frame that straddles two chunks is copied, once.
 */
import { copyBytes } from "./bytes.ts";
import { KittenError } from "./errors.ts";

export const FRAME_HEADER_SIZE = 4;
/** Default largest frame body, in bytes (1 MiB). Brokers announce their own in `welcome`. */
export const MAX_FRAME_SIZE = 1024 * 1024;

const EMPTY = new Uint8Array(0);
/**
 * A batch buffer larger than this shrinks, to twice what the largest of its last SHRINK_WINDOW
 * bursts used, when none of them used a quarter of it.
 */
const SHRINK_ABOVE = 64 * 1024;
/**
 * Bursts watched before a batch shrinks. A replication link alternates bursts of appends with
 * smaller ones (a REMOVE, acks): shrinking at each small burst made the next large one grow it
 * back, an allocation and a copy each time (3–5% of a master's CPU in (f2) and (f3)). Shrinking
 * straight to the size the window needed, a large burst's buffer is given back at most two
 * windows (32 bursts) after it.
 */
const SHRINK_WINDOW = 16;

export class FrameDecoder {
  /** Largest frame body accepted; an owner may change it between chunks (a broker raises it after the handshake). */
  maxFrameSize: number;
  /**
   * Bytes of an incomplete frame (header and/or body) carried over from earlier chunks: the first
   * `#pendingLength` bytes of a buffer that grows by doubling, so that a frame trickled in small
   * chunks costs linear copying, not a copy of everything received so far for every chunk.
   */
  #pending: Uint8Array = EMPTY;
  #pendingLength = 0;

  constructor(maxFrameSize = MAX_FRAME_SIZE) {
    this.maxFrameSize = maxFrameSize;
  }

  /** Number of bytes buffered towards the next frame. */
  get pendingBytes(): number {
    return this.#pendingLength;
  }

  /**
   * Returns every complete frame body contained in the bytes received so far.
   * Bodies may be views into `chunk`: consume them before the chunk is reused.
   * Throws `KittenError("FRAME_TOO_LARGE")` on an oversized length prefix.
   */
  push(chunk: Uint8Array): Uint8Array[] {
    const frames: Uint8Array[] = [];
    this.each(chunk, (data, start, end) => {
      frames.push(data.subarray(start, end));
      return true;
    });
    return frames;
  }

  /**
   * Calls `visit(data, start, end)` for every complete frame body in the bytes received so far,
   * in order, without allocating a view per frame: the body is `data[start, end)`, valid during
   * the call. `visit` returns false to stop (the connection closed): the rest is dropped. If
   * `visit` throws, the frames after that one are kept for the next call and the error passes on.
   * Throws `KittenError("FRAME_TOO_LARGE")` on an oversized length prefix, after visiting the
   * frames before it.
   */
  each(chunk: Uint8Array, visit: (data: Uint8Array, start: number, end: number) => boolean): void {
    let offset = 0;
    let stopped = false;
    if (this.#pendingLength >= FRAME_HEADER_SIZE && this.#pendingLength > FRAME_HEADER_SIZE + readLength(this.#pending, 0)) {
      // Whole frames were kept after a visitor threw (rare): read them and the chunk as one.
      this.#append(chunk);
      chunk = this.#pending.subarray(0, this.#pendingLength);
      this.#pending = EMPTY;
      this.#pendingLength = 0;
    }
    try {
      if (this.#pendingLength > 0) {
        // Only the bytes that complete the pending frame are copied; the rest is read in place.
        offset = this.#fill(chunk);
        const total = this.#pendingLength >= FRAME_HEADER_SIZE ? FRAME_HEADER_SIZE + readLength(this.#pending, 0) : -1;
        if (this.#pendingLength !== total) return; // still short of it: every byte of chunk was taken
        const completed = this.#pending;
        this.#pending = EMPTY;
        this.#pendingLength = 0;
        if (!visit(completed, FRAME_HEADER_SIZE, total)) {
          stopped = true;
          return;
        }
      }
      while (chunk.length - offset >= FRAME_HEADER_SIZE) {
        const length = this.#check(readLength(chunk, offset));
        const end = offset + FRAME_HEADER_SIZE + length;
        if (end > chunk.length) break;
        const start = offset + FRAME_HEADER_SIZE;
        offset = end;
        if (!visit(chunk, start, end)) {
          stopped = true;
          break;
        }
      }
    } finally {
      // Even when `visit` throws, the frames after it stay buffered: the stream stays aligned.
      if (!stopped && offset < chunk.length) {
        // Copy the tail: the caller may reuse `chunk`, and a view would pin the whole chunk.
        this.#pending = copyBytes(chunk, offset);
        this.#pendingLength = this.#pending.length;
      }
    }
  }

  /** Moves into the pending frame the bytes of `chunk` it still lacks (header, then body); returns how many. */
  #fill(chunk: Uint8Array): number {
    let taken = 0;
    if (this.#pendingLength < FRAME_HEADER_SIZE) {
      taken = Math.min(FRAME_HEADER_SIZE - this.#pendingLength, chunk.length);
      this.#append(chunk.subarray(0, taken));
      if (this.#pendingLength < FRAME_HEADER_SIZE) return taken;
    }
    const total = FRAME_HEADER_SIZE + this.#check(readLength(this.#pending, 0));
    const more = Math.min(total - this.#pendingLength, chunk.length - taken);
    this.#append(chunk.subarray(taken, taken + more));
    return taken + more;
  }

  #check(length: number): number {
    if (length > this.maxFrameSize) {
      throw new KittenError(
        "FRAME_TOO_LARGE",
        `Cannot decode frame: length ${length} exceeds maxFrameSize ${this.maxFrameSize}`,
        { length, maxFrameSize: this.maxFrameSize },
      );
    }
    return length;
  }

  #append(chunk: Uint8Array): void {
    const needed = this.#pendingLength + chunk.length;
    if (needed > this.#pending.length) {
      const next = new Uint8Array(Math.max(needed, this.#pending.length * 2));
      next.set(this.#pending.subarray(0, this.#pendingLength));
      this.#pending = next;
    }
    this.#pending.set(chunk, this.#pendingLength);
    this.#pendingLength = needed;
  }
}

function readLength(data: Uint8Array, offset: number): number {
  return ((data[offset]! << 24) >>> 0) + (data[offset + 1]! << 16) + (data[offset + 2]! << 8) +
    data[offset + 3]!;
}

/** Prefixes one encoded body with its length. */
export function frame(body: Uint8Array): Uint8Array {
  const out = new Uint8Array(FRAME_HEADER_SIZE + body.length);
  writeLength(out, 0, body.length);
  out.set(body, FRAME_HEADER_SIZE);
  return out;
}

/** Writes a frame's length prefix (FRAME_HEADER_SIZE bytes, big-endian) at `offset`. */
export function writeLength(out: Uint8Array, offset: number, length: number): void {
  out[offset] = length >>> 24;
  out[offset + 1] = (length >>> 16) & 0xff;
  out[offset + 2] = (length >>> 8) & 0xff;
  out[offset + 3] = length & 0xff;
}

/**
 * Collects many frames into one buffer so that a burst of operations costs one socket write.
 * `take()` hands out the bytes collected so far and starts a new batch after them, in the same
 * buffer while it has room: on Node a copy of its own costs a small frame about 1 µs (an
 * ArrayBuffer allocated outside the heap), a view of a shared buffer a tenth of that. The bytes
 * handed out are never written again; a view keeps its buffer alive until it is dropped.
 */
export class FrameBatch {
  #buffer: Uint8Array;
  /** What a new buffer starts at once take() handed out part of the current one. */
  readonly #initialSize: number;
  /** The batch is `#buffer[#start, #end)`: bytes before `#start` were handed out by take(). */
  #start = 0;
  #end = 0;
  #frames = 0;
  /** The most bytes one of the last clears (up to SHRINK_WINDOW) held, and how many clears that is. */
  #peak = 0;
  #clears = 0;
  /** Offset of the frame being written with beginFrame()/endFrame(). */
  #frameStart = -1;

  constructor(initialSize = 16 * 1024) {
    this.#initialSize = initialSize;
    this.#buffer = new Uint8Array(initialSize);
  }

  get byteLength(): number {
    return this.#end - this.#start;
  }

  get frameCount(): number {
    return this.#frames;
  }

  /** Appends one frame whose CBOR body is `body`. */
  push(body: Uint8Array): void {
    this.#reserve(FRAME_HEADER_SIZE + body.length);
    writeLength(this.#buffer, this.#end, body.length);
    this.#buffer.set(body, this.#end + FRAME_HEADER_SIZE);
    this.#end += FRAME_HEADER_SIZE + body.length;
    this.#frames++;
  }

  /** Appends frames that already carry their length prefix (from another batch's take()). */
  pushFramed(frames: Uint8Array, count = 1): void {
    this.#reserve(frames.length);
    this.#buffer.set(frames, this.#end);
    this.#end += frames.length;
    this.#frames += count;
  }

  // ── writing a frame item by item (hot_ops.ts) ──────────────────────────────────────────────

  /** Starts a frame whose body is written with the item methods below. */
  beginFrame(): void {
    this.#reserve(FRAME_HEADER_SIZE);
    this.#frameStart = this.#end;
    this.#end += FRAME_HEADER_SIZE;
  }

  endFrame(): void {
    writeLength(this.#buffer, this.#frameStart, this.#end - this.#frameStart - FRAME_HEADER_SIZE);
    this.#frameStart = -1;
    this.#frames++;
  }

  arrayHeader(length: number): void {
    this.#head(4, length);
  }

  /** An unsigned integer up to Number.MAX_SAFE_INTEGER. */
  uint(value: number): void {
    this.#head(0, value);
  }

  text(value: string): void {
    this.#reserve(9 + value.length * 3);
    this.#end = writeText(this.#buffer, this.#end, value);
  }

  bytes(value: Uint8Array): void {
    this.#reserve(9 + value.length);
    this.#head(2, value.length);
    this.#buffer.set(value, this.#end);
    this.#end += value.length;
  }

  /** Appends an item already encoded as CBOR (a rare field the hand-written writers do not spell out). */
  encoded(item: Uint8Array): void {
    this.#reserve(item.length);
    this.#buffer.set(item, this.#end);
    this.#end += item.length;
  }

  /** Returns the collected bytes (the caller's: the batch never writes them again) and empties the batch. */
  take(): Uint8Array {
    const out = this.#buffer.subarray(this.#start, this.#end);
    this.#start = this.#end;
    this.#frames = 0;
    return out;
  }

  /**
   * The collected bytes as a view, valid until the next write to the batch: for a writer that
   * takes them synchronously (and copies what it cannot take), then calls `clear()`.
   */
  view(): Uint8Array {
    return this.#buffer.subarray(this.#start, this.#end);
  }

  /** Empties the batch and keeps its buffer; one that grew for a burst shrinks back once bursts stay small. */
  clear(): void {
    const held = this.#end - this.#start;
    if (held > this.#peak) this.#peak = held;
    this.#end = this.#start;
    this.#frames = 0;
    if (++this.#clears < SHRINK_WINDOW) return;
    if (this.#buffer.length > SHRINK_ABOVE && this.#peak < this.#buffer.length >> 2) {
      let size = SHRINK_ABOVE;
      while (size < 2 * this.#peak) size *= 2;
      this.#buffer = new Uint8Array(size);
      this.#start = this.#end = 0;
    }
    this.#peak = 0;
    this.#clears = 0;
  }

  /** A CBOR item head: major type and argument, in the shortest form (RFC 8949 §3). */
  #head(major: number, value: number): void {
    this.#reserve(9);
    this.#end = writeHead(this.#buffer, this.#end, major, value);
  }

  /**
   * Room for `extra` more bytes. A full buffer is replaced by one twice its size, or, when bytes
   * of it were handed out, by one of the initial size (the handed-out bytes stay where they are);
   * the batch so far, an unfinished frame included, moves to the new buffer's start.
   */
  #reserve(extra: number): void {
    if (this.#end + extra <= this.#buffer.length) return;
    const held = this.#end - this.#start;
    let size = this.#start > 0 ? this.#initialSize : this.#buffer.length * 2;
    while (size < held + extra) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.#buffer.subarray(this.#start, this.#end));
    if (this.#frameStart >= 0) this.#frameStart -= this.#start;
    this.#buffer = next;
    this.#start = 0;
    this.#end = held;
  }
}

const textEncoder = new TextEncoder();

/**
 * Writes `value` as a CBOR text item at `at`, which has 9 + 3 × `value.length` bytes of room;
 * returns where it ends. ASCII (ids, names, most text) is copied a byte per character, anything
 * else goes through the UTF-8 encoder, which writes a lone surrogate as U+FFFD; with `strict`, a
 * string holding one is not written and -1 is returned instead.
 */
export function writeText(buffer: Uint8Array, at: number, value: string, strict = false): number {
  const length = value.length;
  const start = at;
  at = writeHead(buffer, at, 3, length);
  for (let i = 0; i < length; i++) {
    const code = value.charCodeAt(i);
    if (code >= 0x80) {
      // Not ASCII: its UTF-8 length differs from the string's, and so may the head.
      if (strict && !value.isWellFormed()) return -1;
      const encoded = textEncoder.encode(value);
      at = writeHead(buffer, start, 3, encoded.length);
      buffer.set(encoded, at);
      return at + encoded.length;
    }
    buffer[at + i] = code;
  }
  return at + length;
}

/**
 * Writes a CBOR item head (major type and argument, in the shortest form: RFC 8949 §3) at `at`,
 * which has 9 bytes of room; returns where it ends.
 */
export function writeHead(buffer: Uint8Array, at: number, major: number, value: number): number {
  const type = major << 5;
  if (value < 24) buffer[at++] = type | value;
  else if (value < 0x100) {
    buffer[at++] = type | 24;
    buffer[at++] = value;
  } else if (value < 0x10000) {
    buffer[at++] = type | 25;
    buffer[at++] = value >>> 8;
    buffer[at++] = value & 0xff;
  } else if (value < 0x100000000) {
    buffer[at++] = type | 26;
    buffer[at++] = value >>> 24;
    buffer[at++] = (value >>> 16) & 0xff;
    buffer[at++] = (value >>> 8) & 0xff;
    buffer[at++] = value & 0xff;
  } else {
    buffer[at++] = type | 27;
    const high = Math.floor(value / 0x100000000);
    const low = value >>> 0;
    buffer[at++] = high >>> 24;
    buffer[at++] = (high >>> 16) & 0xff;
    buffer[at++] = (high >>> 8) & 0xff;
    buffer[at++] = high & 0xff;
    buffer[at++] = low >>> 24;
    buffer[at++] = (low >>> 16) & 0xff;
    buffer[at++] = (low >>> 8) & 0xff;
    buffer[at++] = low & 0xff;
  }
  return at;
}
