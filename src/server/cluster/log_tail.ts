/**
 * The newest entries of the replication log, kept in memory as the framed bytes that went (or
 * came) over the peer links: what a master sends a slave that catches up from a position, and
 * what a slave undoes when it went further than its new master. Bounded by bytes; the oldest
 * entries go first, and a slave whose position is older than what is kept gets a snapshot.
 *
 * The frames are copied into large chunks, and each entry is a few numbers in typed arrays: a
 * tail of 64 MiB is some 400,000 entries, and as one object and one buffer each they made the
 * collector trace them all, over and over, for about a third of a replicating broker's CPU. A
 * chunk is never written again once full, so the views handed out stay valid after their
 * entries leave (they keep their chunk alive until dropped).
 */
import { decode } from "../../protocol/cbor.ts";
import { FRAME_HEADER_SIZE, writeLength } from "../../protocol/frame.ts";
import { readAppend } from "../../protocol/hot_ops.ts";
import { OP } from "../../protocol/ops.ts";
import { Deque } from "../internal/deque.ts";

/** Bytes of entries kept by default: at 150-byte entries about 450,000 of them. */
export const RETAINED_LOG_BYTES = 64 * 1024 * 1024;
/** The size of a chunk (a frame larger than this gets a chunk of its own size). */
const CHUNK_BYTES = 1024 * 1024;

interface Chunk {
  bytes: Uint8Array;
  /** Bytes written; the rest is free (only the newest chunk is written to). */
  used: number;
}

export class LogTail {
  /** The chunks that hold the kept entries, oldest first; `#firstChunk` numbers the first. */
  readonly #chunks = new Deque<Chunk>();
  #firstChunk = 0;
  // The entries, oldest first, in a ring of `#capacity` slots starting at `#head`.
  #capacity = 1024;
  #head = 0;
  #count = 0;
  /** The number of the chunk that holds each entry's frame. */
  #chunkOf = new Int32Array(this.#capacity);
  #offset = new Int32Array(this.#capacity);
  #length = new Int32Array(this.#capacity);
  /** Bytes of every entry pushed up to this one, counted from the tail's start: a lag in bytes is one subtraction. */
  #end = new Float64Array(this.#capacity);
  #bytes = 0;
  /** Bytes of every entry pushed since the tail was made or reset (what `end` counts from). */
  #pushed = 0;
  /** The index of the entry before the first kept one: entries after it are all here. */
  #base: number;

  constructor(last: number, readonly maxBytes = RETAINED_LOG_BYTES) {
    this.#base = last;
  }

  /** Entries after this index are kept (up to `last`). */
  get base(): number {
    return this.#base;
  }

  /** The last index kept (the base when nothing is). */
  get last(): number {
    return this.#base + this.#count;
  }

  get bytes(): number {
    return this.#bytes;
  }

  get length(): number {
    return this.#count;
  }

  /** Keeps the entry `index` (its frame, length prefix included), which must follow the last one; returns the kept copy. */
  push(index: number, frame: Uint8Array): Uint8Array {
    const kept = this.#reserve(index, frame.length);
    kept.set(frame);
    return kept;
  }

  /** The same for a frame given without its length prefix. */
  pushBody(index: number, body: Uint8Array): Uint8Array {
    const kept = this.#reserve(index, FRAME_HEADER_SIZE + body.length);
    writeLength(kept, 0, body.length);
    kept.set(body, FRAME_HEADER_SIZE);
    return kept;
  }

  /** True when every entry after `index` (up to the last) is kept. */
  holdsAfter(index: number): boolean {
    return index >= this.#base && index <= this.last;
  }

  /**
   * The frames of the entries after `index`, oldest first. The list is taken now (entries may go
   * or be truncated while a slow slave is sent them), as views of the kept bytes, never a copy.
   */
  framesAfter(index: number): Uint8Array[] {
    const frames: Uint8Array[] = [];
    // Entries have consecutive indexes: the first one wanted is at a known place.
    for (let i = Math.max(0, index - this.#base); i < this.#count; i++) frames.push(this.#frame(this.#slot(i)));
    return frames;
  }

  /** Bytes of the entries after `index` (all of them when `index` is older than the tail). */
  bytesAfter(index: number): number {
    if (this.#count === 0 || index >= this.last) return 0;
    let pushedBefore: number;
    if (index <= this.#base) {
      const first = this.#slot(0);
      pushedBefore = this.#end[first]! - this.#length[first]!;
    } else {
      pushedBefore = this.#end[this.#slot(index - this.#base - 1)]!;
    }
    return this.#pushed - pushedBefore;
  }

  /** Drops the entries after `index`; returns the message ids they appended, oldest first. */
  truncate(index: number): string[] {
    const appended: string[] = [];
    while (this.#count > 0 && this.last > index) {
      const slot = this.#slot(this.#count - 1);
      const id = appendedId(this.#frame(slot));
      if (id !== null) appended.push(id);
      this.#bytes -= this.#length[slot]!;
      this.#pushed -= this.#length[slot]!;
      this.#count--;
    }
    if (this.#base > index) this.#base = index;
    return appended.reverse();
  }

  /** Forgets everything: the log now starts after `last`. */
  reset(last: number): void {
    this.#chunks.clear();
    this.#firstChunk = 0;
    this.#head = 0;
    this.#count = 0;
    this.#bytes = 0;
    this.#base = last;
  }

  /** Room for the frame of entry `index`, `size` bytes, as the last entry; the oldest go past maxBytes. */
  #reserve(index: number, size: number): Uint8Array {
    if (index !== this.last + 1) {
      // A gap (entries lost on the way cannot be): what is kept no longer runs up to `index`.
      this.reset(index - 1);
    }
    let chunk = this.#chunks.last();
    if (chunk === undefined || chunk.used + size > chunk.bytes.length) {
      chunk = { bytes: new Uint8Array(Math.max(CHUNK_BYTES, size)), used: 0 };
      this.#chunks.push(chunk);
    }
    if (this.#count === this.#capacity) this.#grow();
    const slot = this.#slot(this.#count);
    this.#chunkOf[slot] = this.#firstChunk + this.#chunks.length - 1;
    this.#offset[slot] = chunk.used;
    this.#length[slot] = size;
    this.#pushed += size;
    this.#end[slot] = this.#pushed;
    this.#count++;
    this.#bytes += size;
    const kept = chunk.bytes.subarray(chunk.used, chunk.used + size);
    chunk.used += size;
    while (this.#bytes > this.maxBytes && this.#count > 1) this.#dropOldest();
    return kept;
  }

  #dropOldest(): void {
    this.#bytes -= this.#length[this.#head]!;
    this.#head = (this.#head + 1) % this.#capacity;
    this.#count--;
    this.#base++;
    // Chunks before the one the oldest entry is in hold nothing kept any more.
    const firstNeeded = this.#chunkOf[this.#head]!;
    while (this.#firstChunk < firstNeeded) {
      this.#chunks.shift();
      this.#firstChunk++;
    }
  }

  #slot(i: number): number {
    return (this.#head + i) % this.#capacity;
  }

  #frame(slot: number): Uint8Array {
    const chunk = this.#chunks.at(this.#chunkOf[slot]! - this.#firstChunk)!;
    const offset = this.#offset[slot]!;
    return chunk.bytes.subarray(offset, offset + this.#length[slot]!);
  }

  /** Doubles the entry ring, keeping the entries in order from slot 0. */
  #grow(): void {
    const capacity = this.#capacity * 2;
    const chunkOf = new Int32Array(capacity);
    const offset = new Int32Array(capacity);
    const length = new Int32Array(capacity);
    const end = new Float64Array(capacity);
    for (let i = 0; i < this.#count; i++) {
      const slot = this.#slot(i);
      chunkOf[i] = this.#chunkOf[slot]!;
      offset[i] = this.#offset[slot]!;
      length[i] = this.#length[slot]!;
      end[i] = this.#end[slot]!;
    }
    this.#chunkOf = chunkOf;
    this.#offset = offset;
    this.#length = length;
    this.#end = end;
    this.#capacity = capacity;
    this.#head = 0;
  }
}

/** The message id an entry's frame appended, or null for another entry (a REMOVE). */
function appendedId(frame: Uint8Array): string | null {
  const fast = readAppend(frame, FRAME_HEADER_SIZE, frame.length);
  if (fast !== undefined) return fast[2];
  let value: unknown;
  try {
    value = decode(frame.subarray(FRAME_HEADER_SIZE));
  } catch {
    return null; // not an entry this broker could have applied: nothing of it to undo
  }
  return Array.isArray(value) && value[0] === OP.APPEND && typeof value[2] === "string" ? value[2] : null;
}
