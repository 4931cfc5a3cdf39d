/**
 * The store's message journal: two files written in turn in front of the database, so that a
 * message acked soon after it was confirmed never costs SQLite a row. Most messages of a busy
 * queue live for milliseconds; writing each one into two B-trees (the table and the index by
 * queue), then deleting it from both, cost the broker about 2 µs per message, where appending it
 * to a file costs a copy of its bytes. The group commit writes one frame per commit (the
 * commit's appends, and the removes of journaled messages acked since the last one) and fsyncs it.
 *
 * Two files, `journal-a` and `journal-b`, written in turn. Once the one being written reaches its
 * limit (`segmentLimit`: 4 MiB, less on a disk with little room), writing moves to the other,
 * written over from its start (recycled: journal_frames.ts). By then the messages in it were
 * nearly all acked: one with none left is simply recycled; one still holding live messages has
 * them moved into the database first ("settled", by the store: sqlite_store.ts). So only a
 * message that outlives a file's turn costs a row.
 * The store also settles everything when a read needs every message in the database (paging,
 * a snapshot, close); the live messages up to one with a delivery count or a delay due (columns
 * of its row); and the oldest live messages, a few thousand per commit, while the journal holds
 * more than JOURNAL_LIVE_MESSAGES or JOURNAL_LIVE_BYTES (a queue filling with no consumer: memory
 * stays bounded, each commit short, and it pays about what it did without a journal).
 *
 * The files' format, and how they are read back at open: journal_frames.ts; what the broker keeps
 * of each file while it runs: journal_segment.ts.
 */
import type { Database } from "bun:sqlite";
import { closeSync, fdatasyncSync, ftruncateSync, writeSync } from "node:fs";
import { join } from "node:path";
import { KittenError } from "../../protocol/errors.ts";
import type { Logger } from "../log.ts";
import { describe, type SqliteStoreStats } from "./database.ts";
import { FrameEncoder, readJournalFile } from "./journal_frames.ts";
import { JournalSegment } from "./journal_segment.ts";
import { IdCounts } from "./id_counts.ts";
import { getMeta } from "./record.ts";
import type { StoredMessage } from "./store.ts";
import { type StoreUsage, UsageDelta } from "./usage.ts";

/** The journal's files inside the data directory. */
export const JOURNAL_FILES = ["journal-a", "journal-b"] as const;
/** Meta key: the highest position a settle covered. */
export const JOURNAL_THROUGH = "journal_through";
/** A file's limit: at most this, and at most a sixteenth of the disk's free space, at least MIN. */
export const JOURNAL_SEGMENT_BYTES = 4 * 1024 * 1024;
export const JOURNAL_SEGMENT_MIN_BYTES = 64 * 1024;
/**
 * The oldest journaled messages are settled once this many are unacked, or their bodies take this
 * much: room for the sends that many clients keep in flight (windows of thousands each) to be
 * acked first, where a queue filling with no consumer passes it within a fraction of a second.
 */
export const JOURNAL_LIVE_MESSAGES = 32768;
export const JOURNAL_LIVE_BYTES = 4 * 1024 * 1024;
/**
 * What a commit settles past the bound (more only when one commit's appends went further past
 * it), and at most while a file is emptied so that writing can move back to it: a settle is one
 * transaction, and the WAL (cut back to 1 MiB) and the reserve for a full disk (space.ts) are
 * sized for transactions of this order.
 */
export const JOURNAL_SETTLE_MESSAGES = 2048;
export const JOURNAL_SETTLE_BYTES = 256 * 1024;

/**
 * Opens the journal of the store in `directory` (its database `db`, closed on failure) and counts
 * what it holds in `usage` (the table gets it at the next settle).
 */
export function openJournal(db: Database, directory: string, readFree: (directory: string) => number, store: JournalStore, log: Logger): Journal {
  const through = Number(getMeta(db, JOURNAL_THROUGH) ?? 0);
  let journal: Journal;
  try {
    journal = new Journal(directory, through, () => readFree(directory), store);
  } catch (error) {
    db.close();
    throw new KittenError("STORE_UNAVAILABLE", `Cannot open the journal in "${directory}": ${describe(error)}`, undefined, { cause: error });
  }
  if (journal.liveCount > 0) log.info("store", `directory=${directory};messages=${journal.liveCount};journaled messages read back`);
  return journal;
}

/** What of the store the journal keeps up to date: the usage figures (journaled messages count) and its counters. */
export interface JournalStore {
  usage: StoreUsage;
  stats: Pick<SqliteStoreStats, "journaled" | "journalWrites" | "journalSyncs">;
}

/** The open journal: its two files, the live messages, and the frame of the next commit. */
export class Journal {
  /** The first position the store may give: above every entry and every settle, so that none is reused. */
  readonly nextSeq: number;
  /** The file being written, and the other. */
  #current: JournalSegment;
  #previous: JournalSegment;
  /** The current file's limit (bytes), set when writing moves to it. */
  #limit: number;
  /** Positions of journaled messages removed since the last frame, and the messages. */
  #removes: number[] = [];
  #removed: StoredMessage[] = [];
  readonly #frames = new FrameEncoder();
  /** A write failed: settle everything, which empties both files (a torn frame may be left). */
  #failed = false;
  /** The highest generation a file was given (journal_frames.ts): each turn takes the next. */
  #generation: number;
  /** Ids of live messages: kept only once `holds()` was asked (a slave's check by id). */
  #ids: IdCounts | null = null;
  readonly #freeBytes: () => number;
  readonly #store: JournalStore;

  /**
   * Reads the files in `directory` (entries at or below `through` are settled already) and opens
   * them for writing, each cut back to its whole frames of its generation, and counts what they
   * hold in the usage figures (the table gets it at the next settle). `freeBytes`: the disk's
   * free space.
   */
  constructor(directory: string, through: number, freeBytes: () => number, store: JournalStore) {
    this.#freeBytes = freeBytes;
    this.#store = store;
    const reads = JOURNAL_FILES.map((name) => readJournalFile(join(directory, name)));
    let maxSeq = through;
    const removed = new Set<number>();
    for (const read of reads) {
      for (const seq of read.removes) {
        removed.add(seq);
        if (seq > maxSeq) maxSeq = seq;
      }
    }
    const segments = reads.map((read, i) => new JournalSegment(join(directory, JOURNAL_FILES[i]!), read));
    for (let i = 0; i < reads.length; i++) {
      for (const [seq, message] of reads[i]!.appends) {
        if (seq > maxSeq) maxSeq = seq;
        if (seq > through && !removed.has(seq)) segments[i]!.add(message);
      }
    }
    // Writing goes on in the file turned to last (format 6: the one with the newest entries).
    const [a, b] = segments as [JournalSegment, JournalSegment];
    const bIsNewer = b.generation !== a.generation ? b.generation > a.generation : b.lastSeq > a.lastSeq;
    [this.#current, this.#previous] = bIsNewer ? [b, a] : [a, b];
    this.#generation = Math.max(a.generation, b.generation);
    this.nextSeq = maxSeq + 1;
    this.#limit = this.#segmentLimit();
    const usage = new UsageDelta();
    for (const [, message] of this.live()) usage.add(message, 1);
    store.usage.apply(usage);
  }

  /** Journaled messages not removed. */
  get liveCount(): number {
    return this.#previous.liveCount + this.#current.liveCount;
  }

  /** Live messages in position order (every one is above every row of the database). */
  *live(): IterableIterator<[number, StoredMessage]> {
    // The previous file's positions all come before the current one's.
    yield* this.#previous.live();
    yield* this.#current.live();
  }

  /** `rows` (of `queue`, from position `from`) followed by live messages of it, up to `limit` in all. */
  readAfter(rows: StoredMessage[], queue: string, from: number, limit: number): StoredMessage[] {
    if (this.liveCount === 0) return rows;
    for (const [seq, message] of this.live()) {
      if (rows.length >= limit) break;
      if (seq >= from && message.queue === queue) rows.push(message);
    }
    return rows;
  }

  /** The position of the newest live message of `queue`, or null when it has none. */
  lastPosition(queue: string): number | null {
    let last = null;
    for (const [seq, message] of this.live()) if (message.queue === queue) last = seq;
    return last;
  }

  /** Bytes in both files. */
  get size(): number {
    return this.#previous.size + this.#current.size;
  }

  /** Removes of journaled messages waiting for the next frame. */
  get pendingRemoves(): number {
    return this.#removes.length;
  }

  /**
   * True when everything should be settled: a write failed (the disk, most likely), and the
   * database alone decides when the store is writable again, as it does for a failing store.
   */
  get full(): boolean {
    return this.#failed;
  }

  /**
   * The oldest live messages to move into the database with the next commit, and the position
   * that commit covers (`journal_through`), or null when none need to be: those up to `target`
   * (a count or a delay is due for that one: `rowlessThrough`); once the live messages reach
   * JOURNAL_LIVE_MESSAGES or JOURNAL_LIVE_BYTES, as many as bring them a settle's worth
   * (JOURNAL_SETTLE_MESSAGES, JOURNAL_SETTLE_BYTES) under it; and, while writing must move back to
   * the previous file (the current one is past its limit), a settle's worth of the previous file's.
   * A prefix of the positions, so that one number tells a reader what is settled.
   */
  toSettle(target = 0): { messages: Map<number, StoredMessage>; through: number } | null {
    const previous = this.#previous;
    const emptying = this.#current.size >= this.#limit && previous.liveCount > 0 ? previous.lastSeq : 0;
    let count = this.liveCount;
    let bytes = previous.liveBytes + this.#current.liveBytes;
    const bounded = count >= JOURNAL_LIVE_MESSAGES || bytes >= JOURNAL_LIVE_BYTES;
    if (target === 0 && emptying === 0 && !bounded) return null;
    const over = () => count > JOURNAL_LIVE_MESSAGES - JOURNAL_SETTLE_MESSAGES || bytes > JOURNAL_LIVE_BYTES - JOURNAL_SETTLE_BYTES;
    const messages = new Map<number, StoredMessage>();
    let through = target;
    let settlingBytes = 0;
    for (const [seq, message] of this.live()) {
      const emptyingMore = seq <= emptying && messages.size < JOURNAL_SETTLE_MESSAGES && settlingBytes < JOURNAL_SETTLE_BYTES;
      if (seq > target && !(bounded && over()) && !emptyingMore) break;
      messages.set(seq, message);
      if (seq > through) through = seq;
      count--;
      bytes -= message.body.length;
      settlingBytes += message.body.length;
    }
    return messages.size === 0 ? null : { messages, through };
  }

  /** A commit moved the live messages up to `through` into the database (`toSettle`). */
  settledThrough(through: number): void {
    if (this.#ids !== null) {
      for (const [seq, message] of this.live()) {
        if (seq > through) break;
        this.#ids.delete(message.id);
      }
    }
    this.#previous.settleThrough(through);
    this.#current.settleThrough(through);
    if (this.#current.size >= this.#limit && this.#previous.liveCount === 0) this.#turn();
  }

  /**
   * The highest position of `messages` that has no row yet (journaled, or an append still
   * `pending`), or 0: a count or a delay for it is a column of its row, so the journal is settled
   * up to there with it (`toSettle`).
   */
  rowlessThrough(messages: Iterable<StoredMessage>, pending: ReadonlyMap<number, StoredMessage>, through = 0): number {
    for (const message of messages) {
      const seq = message.position;
      if (seq === undefined || seq <= through) continue;
      if (pending.has(seq) || this.#holding(seq) !== null) through = seq;
    }
    return through;
  }

  /**
   * A message was removed (acked; its `position` was `seq` and is undefined now): true when it was
   * journaled, and its REMOVE goes in the next frame.
   */
  remove(seq: number, message: StoredMessage): boolean {
    const segment = this.#holding(seq);
    if (segment === null) return false; // a row of the database
    segment.removed(message);
    this.#ids?.delete(message.id);
    this.#removes.push(seq);
    this.#removed.push(message);
    return true;
  }

  /**
   * Writes one frame, the appends (each with its own count and delay) and the pending removes,
   * fsynced when there are appends, and adds the appends to the live ones. On failure the file is
   * cut back to where it was and nothing changes (the removes stay pending): the error is thrown,
   * and the journal asks to be settled.
   */
  write(appends: Map<number, StoredMessage>): void {
    const sync = appends.size > 0;
    const segment = this.#current;
    const frame = this.#frames.encode(appends, this.#removes, segment.generation);
    try {
      // At the file's end of this generation: a recycled file is written over from its start.
      for (let at = 0; at < frame.length;) at += writeSync(segment.fd, frame, at, frame.length - at, segment.size + at);
      if (sync) fdatasyncSync(segment.fd);
    } catch (error) {
      this.#failed = true;
      try {
        ftruncateSync(segment.fd, segment.size);
      } catch {
        // Settling empties it.
      }
      throw error;
    }
    segment.size += frame.length;
    const usage = new UsageDelta();
    for (const message of appends.values()) {
      this.#addLive(segment, message);
      usage.add(message, 1);
    }
    for (const message of this.#removed) usage.add(message, -1);
    this.#store.usage.apply(usage);
    const stats = this.#store.stats;
    stats.journaled += appends.size;
    stats.journalWrites++;
    if (sync) stats.journalSyncs++;
    this.#removes = [];
    this.#removed = [];
    if (segment.size >= this.#limit && this.#previous.liveCount === 0) this.#turn();
  }

  /** True when a live journaled message has this id. */
  holds(messageId: string): boolean {
    if (this.#ids === null) {
      this.#ids = new IdCounts();
      for (const [, message] of this.live()) this.#ids.add(message.id);
    }
    return this.#ids.has(messageId);
  }

  /**
   * A settle committed every live message into the database: both files start over, empty.
   * Pending removes are dropped too (their messages were not live, so not settled: nothing is
   * left to remove), and leave the usage figures. A file that cannot be emptied is only longer:
   * the settle's `journal_through` makes a reader skip what it holds.
   */
  settled(): void {
    const usage = new UsageDelta();
    for (const message of this.#removed) usage.add(message, -1);
    this.#store.usage.apply(usage);
    this.#removes = [];
    this.#removed = [];
    if (this.#ids !== null) this.#ids.clear();
    const previousEmptied = this.#previous.empty(++this.#generation);
    const currentEmptied = this.#current.empty(++this.#generation);
    if (previousEmptied && currentEmptied) this.#failed = false;
    this.#limit = this.#segmentLimit();
  }

  close(): void {
    closeSync(this.#previous.fd);
    closeSync(this.#current.fd);
  }

  /**
   * Writing moves to the previous file (its live messages were removed or settled), written over
   * from its start in a new generation rather than truncated: freeing its blocks cost the broker's
   * thread about 0.1 µs per message, and a file whose size does not change is fsynced without a
   * journal commit of the file system's (on the 2-core box, a 160 KB fdatasync took 0.24 ms at
   * the median over written blocks against 0.30 ms appending, and (c3)'s confirm p99 went from
   * 2.81 to 2.41 ms).
   */
  #turn(): void {
    const next = this.#previous;
    next.recycle(++this.#generation);
    this.#previous = this.#current;
    this.#current = next;
    this.#limit = this.#segmentLimit();
  }

  /** A file's limit now: JOURNAL_SEGMENT_BYTES, less on a disk with little room. */
  #segmentLimit(): number {
    let free = Infinity;
    try {
      free = this.#freeBytes();
    } catch {
      // Unknown: the default limit.
    }
    return Math.max(JOURNAL_SEGMENT_MIN_BYTES, Math.min(JOURNAL_SEGMENT_BYTES, Math.floor(free / 16)));
  }

  #addLive(segment: JournalSegment, message: StoredMessage): void {
    segment.add(message);
    this.#ids?.add(message.id);
  }

  /**
   * The file holding a position live, or null: the database's rows are below every journaled
   * position, each file's positions above the one written before it, and a file's settled prefix
   * is in the database.
   */
  #holding(seq: number): JournalSegment | null {
    const segment = seq >= this.#current.firstSeq ? this.#current : seq >= this.#previous.firstSeq ? this.#previous : null;
    return segment === null || seq <= segment.settledThrough ? null : segment;
  }
}
