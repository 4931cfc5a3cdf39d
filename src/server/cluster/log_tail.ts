/**
 * The newest entries of the replication log, kept in memory as the framed bytes that went (or
 * came) over the peer links: what a master sends a slave that catches up from a position, and
 * what a slave undoes when it went further than its new master. Bounded by bytes; the oldest
 * entries go first, and a slave whose position is older than what is kept gets a snapshot.
 */
import { Deque } from "../internal/deque.ts";

/** Bytes of entries kept by default: at 150-byte entries about 450,000 of them. */
export const RETAINED_LOG_BYTES = 64 * 1024 * 1024;

interface Entry {
  index: number;
  frame: Uint8Array;
  /** The message id of an APPEND (what undoing it drops); null for a REMOVE. */
  appended: string | null;
  /** Bytes of every entry pushed up to this one, counted from the tail's start: a lag in bytes is one subtraction. */
  end: number;
}

export class LogTail {
  readonly #entries = new Deque<Entry>();
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
    return this.#entries.length === 0 ? this.#base : this.#entries.last()!.index;
  }

  get bytes(): number {
    return this.#bytes;
  }

  get length(): number {
    return this.#entries.length;
  }

  /** Keeps the entry `index`, which must follow the last one. */
  push(index: number, frame: Uint8Array, appended: string | null): void {
    if (index !== this.last + 1) {
      // A gap (entries lost on the way cannot be): what is kept no longer runs up to `index`.
      this.reset(index - 1);
    }
    this.#pushed += frame.length;
    this.#entries.push({ index, frame, appended, end: this.#pushed });
    this.#bytes += frame.length;
    while (this.#bytes > this.maxBytes && this.#entries.length > 1) {
      const dropped = this.#entries.shift()!;
      this.#bytes -= dropped.frame.length;
      this.#base = dropped.index;
    }
  }

  /** True when every entry after `index` (up to the last) is kept. */
  holdsAfter(index: number): boolean {
    return index >= this.#base && index <= this.last;
  }

  /**
   * The frames of the entries after `index`, oldest first. The list is taken now (entries may go
   * or be truncated while a slow slave is sent them), but holds the same frames, never a copy.
   */
  framesAfter(index: number): Uint8Array[] {
    const frames: Uint8Array[] = [];
    // Entries have consecutive indexes: the first one wanted is at a known place.
    for (let i = Math.max(0, index - this.#base); i < this.#entries.length; i++) frames.push(this.#entries.at(i)!.frame);
    return frames;
  }

  /** Bytes of the entries after `index` (all of them when `index` is older than the tail). */
  bytesAfter(index: number): number {
    if (this.#entries.length === 0 || index >= this.last) return 0;
    const pushedBefore = index <= this.#base ? this.#entries.at(0)!.end - this.#entries.at(0)!.frame.length : this.#entries.at(index - this.#base - 1)!.end;
    return this.#pushed - pushedBefore;
  }

  /** Drops the entries after `index`; returns the message ids they appended, oldest first. */
  truncate(index: number): string[] {
    const appended: string[] = [];
    while (this.#entries.length > 0 && this.#entries.last()!.index > index) {
      const entry = this.#entries.pop()!;
      this.#bytes -= entry.frame.length;
      this.#pushed -= entry.frame.length;
      if (entry.appended !== null) appended.push(entry.appended);
    }
    if (this.#base > index) this.#base = index;
    return appended.reverse();
  }

  /** Forgets everything: the log now starts after `last`. */
  reset(last: number): void {
    this.#entries.clear();
    this.#bytes = 0;
    this.#base = last;
  }
}
