/**
 * One file of the journal (journal.ts) as the broker keeps it while it runs.
 */
import { constants, fsyncSync, ftruncateSync, openSync } from "node:fs";
import type { FileRead } from "./journal_frames.ts";
import type { StoredMessage } from "./store.ts";

/** Arrays of a file's messages shorter than this are never compacted. */
export const COMPACT_FROM = 1024;

/**
 * One journal file: the messages appended to it, how many of them are live (not removed) and
 * their bytes, and its size. Every position appended to it is at or above `firstSeq`, and below
 * the `firstSeq` of the file written after it: a position tells which file holds it. A message is
 * live while its `position` is still the one it was appended with (a removed message's is
 * undefined) and it is above `settledThrough` (the oldest may be moved into the database ahead of
 * the others): no map to keep per message, two array pushes instead.
 */
export class JournalSegment {
  messages: StoredMessage[] = [];
  seqs: number[] = [];
  liveCount = 0;
  liveBytes = 0;
  size: number;
  /** The lowest and the highest position appended to it since it was emptied. */
  firstSeq = Infinity;
  lastSeq = 0;
  /** Positions up to this one were moved into the database (settled), and where they end in the arrays. */
  settledThrough = 0;
  #settledIndex = 0;
  readonly fd: number;
  /** What every frame written to it carries until it is recycled (journal_frames.ts). */
  generation: number;

  /**
   * Opens the file to write after its whole frames of its generation. What follows them (a torn
   * frame, or frames an earlier turn left) is cut off for good before anything is written, so
   * that no later generation can meet it again.
   */
  constructor(readonly path: string, read: FileRead) {
    this.fd = openSync(path, constants.O_RDWR | constants.O_CREAT, 0o644);
    if (read.fileBytes !== read.validBytes) {
      ftruncateSync(this.fd, read.validBytes);
      fsyncSync(this.fd);
    }
    this.size = read.validBytes;
    this.generation = read.generation;
  }

  add(message: StoredMessage): void {
    const seq = message.position!;
    this.messages.push(message);
    this.seqs.push(seq);
    this.liveCount++;
    this.liveBytes += message.body.length;
    if (seq < this.firstSeq) this.firstSeq = seq;
    if (seq > this.lastSeq) this.lastSeq = seq;
  }

  /**
   * A removed message stays in the arrays until the file is emptied: once they hold four times
   * more than is live (and more than COMPACT_FROM), the live ones are copied into new arrays, so
   * that a file filling slowly does not keep every acked message in memory till its turn.
   */
  removed(message: StoredMessage): void {
    this.liveCount--;
    this.liveBytes -= message.body.length;
    if (this.messages.length < COMPACT_FROM || this.messages.length < 4 * this.liveCount) return;
    const messages: StoredMessage[] = [];
    const seqs: number[] = [];
    for (const [seq, live] of this.live()) {
      messages.push(live);
      seqs.push(seq);
    }
    this.messages = messages;
    this.seqs = seqs;
    this.#settledIndex = 0;
  }

  /**
   * Its live messages up to `through` were moved into the database: they are live no more. Each
   * entry is looked at once, however many settles there are.
   */
  settleThrough(through: number): void {
    if (through <= this.settledThrough) return;
    const { messages, seqs } = this;
    let i = this.#settledIndex;
    for (; i < seqs.length && seqs[i]! <= through; i++) {
      const message = messages[i]!;
      if (message.position !== seqs[i]) continue;
      this.liveCount--;
      this.liveBytes -= message.body.length;
    }
    this.#settledIndex = i;
    this.settledThrough = through;
  }

  /** Its live messages, in position order. */
  *live(): IterableIterator<[number, StoredMessage]> {
    if (this.liveCount === 0) return;
    const { messages, seqs } = this;
    for (let i = this.#settledIndex; i < messages.length; i++) if (messages[i]!.position === seqs[i]) yield [seqs[i]!, messages[i]!];
  }

  /**
   * Writing starts over at the file's start, in `generation`: the frames it holds stay until
   * written over (their messages were removed or settled), and a reader stops at the first one.
   */
  recycle(generation: number): void {
    this.#forget();
    this.size = 0;
    this.generation = generation;
  }

  /**
   * Empties the file (a settle of every message, at close or for a read: rare), so that it takes
   * no room and a restart reads nothing; false when it could not be (it keeps its size, and is
   * written over from its start in `generation` all the same).
   */
  empty(generation: number): boolean {
    this.recycle(generation);
    try {
      ftruncateSync(this.fd, 0);
      return true;
    } catch {
      return false;
    }
  }

  #forget(): void {
    this.messages = [];
    this.seqs = [];
    this.liveCount = 0;
    this.liveBytes = 0;
    this.firstSeq = Infinity;
    this.lastSeq = 0;
    this.settledThrough = 0;
    this.#settledIndex = 0;
  }
}

