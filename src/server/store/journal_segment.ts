/**
 * One file of the journal (journal.ts) as the broker keeps it while it runs.
 */
import { ftruncateSync, openSync } from "node:fs";
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

  constructor(readonly path: string, read: FileRead) {
    this.fd = openSync(path, "a");
    if (read.fileBytes !== read.validBytes) ftruncateSync(this.fd, read.validBytes);
    this.size = read.validBytes;
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

  /** Empties the file; false when it could not be (it keeps its size). */
  empty(): boolean {
    this.messages = [];
    this.seqs = [];
    this.liveCount = 0;
    this.liveBytes = 0;
    this.firstSeq = Infinity;
    this.settledThrough = 0;
    this.#settledIndex = 0;
    try {
      ftruncateSync(this.fd, 0);
      this.size = 0;
      return true;
    } catch {
      return false;
    }
  }
}

