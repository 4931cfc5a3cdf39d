/**
 * The durable store: a journal (journal.ts) in front of one bun:sqlite database in WAL mode
 * (format in record.ts), under the data directory.
 *
 * Group commit (group_commit.ts): `append` and `remove` only record what to do, and one commit
 * per event-loop turn writes everything gathered since the last one as one frame of the journal,
 * so one fsync serves every message that arrived meanwhile, and most are acked before they ever
 * cost a database row.
 * A commit writes the database instead ("settles", taking the journal's unacked messages along)
 * when a read needs them there, a count or a delay is due, the journal holds too many, or the
 * store is failing: synchronously, about 1.2 µs per row plus 1 ms for COMMIT (scripts/store_probe.ts).
 *
 * - `"fsync"` mode: appends are committed on the next turn (`setImmediate`), fsynced; `append`
 *   returns a promise, shared by every message of the batch, that resolves once it is on disk.
 *   Removes alone wait for `commitIntervalMs` (or ride along with the next appends), not fsynced:
 *   nobody waits for them, and a process killed keeps them (the OS has them; power loss may bring
 *   acked messages back: CommitSync in database.ts).
 * - `"batch"` mode: `append` returns nothing (the broker confirms at once) and everything is
 *   committed every `commitIntervalMs`. A crash loses at most the last interval.
 * - A remove whose append is still pending cancels both: the message never touches the disk.
 * - Meta values: `setMeta` writes at once, `setMetaWithNextCommit` with the next commit (meta_values.ts).
 * - Delivery counts (`noteDelivery`) are written for messages still unacked a while after their
 *   delivery (delivery_counts.ts); a nack's delay (`noteDelay`) with the next commit (pending_delays.ts).
 * - Failures (health.ts): in fsync mode the batch's promise rejects with `STORE_UNAVAILABLE`; in
 *   batch mode the confirmed batch is retried every `retryIntervalMs` and new appends are refused
 *   until a commit succeeds. A full disk, the reserve and the space given back are space.ts's.
 *
 * The database is opened with `locking_mode=EXCLUSIVE`: a second broker on the same directory is
 * refused instead of corrupting the first one's queues (and no `-shm` file is needed).
 */
import type { Database } from "bun:sqlite";
import { join } from "node:path";
import { KittenError } from "../../protocol/errors.ts";
import { STORE_VERSION } from "../../version.ts";
import { Logger } from "../log.ts";
import { CommitSync, describe, describeStats, newStats, openDatabase, type SqliteStoreOptions, type SqliteStoreStats } from "./database.ts";
import { DeliveryCounts } from "./delivery_counts.ts";
import { type MetaValue, STORE_FILE } from "./record.ts";
import { GroupCommit } from "./group_commit.ts";
import { type Journal, openJournal } from "./journal.ts";
import { freeBytes } from "./disk_floor.ts";
import { MetaValues } from "./meta_values.ts";
import { StoreHealth } from "./health.ts";
import { HeldIds } from "./held_ids.ts";
import { PendingAppends } from "./pending_appends.ts";
import { PendingDelays } from "./pending_delays.ts";
import { PendingRemoves } from "./pending_removes.ts";
import { RowWrites } from "./row_writes.ts";
import type { DurableMode, PagingStore, QueueUsage, StoredMessage } from "./store.ts";
import { QueueRows } from "./queue_rows.ts";
import { StoreSpace } from "./space.ts";

export type { DurableMode } from "./store.ts";
export { DELIVERY_COUNT_DELAY_MS } from "./delivery_counts.ts";
export { type SqliteStoreOptions, type SqliteStoreStats, WAL_CHECKPOINT_PAGES, WAL_SIZE_LIMIT } from "./database.ts";
export { MAX_DELETES_PER_COMMIT } from "./group_commit.ts";

export class SqliteStore implements PagingStore {
  readonly directory: string;
  readonly mode: DurableMode;
  readonly path: string;
  readonly stats: SqliteStoreStats = newStats();
  readonly #db: Database;
  readonly #log: Logger;
  readonly #commitIntervalMs: number;
  /** Whether writes succeed, and why not (health.ts). */
  readonly #health: StoreHealth;
  readonly #writes: RowWrites;
  /** Reads and usage by queue (queue_rows.ts). */
  readonly #rows: QueueRows;
  /** Disk space: vacuum, truncating checkpoints, the reserve for a full disk (space.ts). */
  readonly #space: StoreSpace;
  /** Confirmed messages not in the database yet (journal.ts). */
  readonly #journal: Journal;
  #nextSeq: number;
  /** Appends not yet committed, and the promise of their batch (pending_appends.ts). */
  readonly #pending: PendingAppends;
  /** Rows to delete, and the index by id that a slave asks (pending_removes.ts, held_ids.ts). */
  readonly #removes: PendingRemoves;
  /** Delivery counts (see `deliveryCountDelayMs`) and delayed requeues not written yet. */
  readonly #counts: DeliveryCounts;
  readonly #delays = new PendingDelays();
  /** The meta table's values, and those for the next commit; whether the next commit is fsynced. */
  readonly #meta: MetaValues;
  readonly #sync: CommitSync;
  /** The commits, and when the next one runs (group_commit.ts). */
  readonly #commit: GroupCommit;
  #closed = false;

  constructor(options: SqliteStoreOptions) {
    this.directory = options.directory;
    this.mode = options.mode ?? "fsync";
    this.#pending = new PendingAppends(this.mode);
    this.path = join(this.directory, STORE_FILE);
    this.#log = options.logger ?? new Logger();
    this.#commitIntervalMs = options.commitIntervalMs ?? 5;
    const retryIntervalMs = options.retryIntervalMs ?? 100;
    this.#counts = new DeliveryCounts(options.deliveryCountDelayMs ?? 0);
    const opened = openDatabase(this.directory, this.path, this.#log, options.indexById ?? true);
    const db = opened.db;
    this.#health = new StoreHealth(this.directory, this.#log, opened, retryIntervalMs);
    this.#db = db;
    this.#sync = new CommitSync(db);
    this.#writes = new RowWrites(db, this.#sync);
    this.#rows = new QueueRows(db);
    this.#removes = new PendingRemoves(new HeldIds(db, opened.indexedById, this.#log, this.directory));
    this.#meta = new MetaValues(db);
    this.#journal = openJournal(db, this.directory, options.readFree ?? freeBytes, { usage: this.#rows.usage, stats: this.stats }, this.#log);
    this.#nextSeq = Math.max(opened.nextSeq, this.#journal.nextSeq);
    const beforeWrite = () => this.#sync.set(false);
    this.#space = new StoreSpace(db, { directory: this.directory, log: this.#log, stats: this.stats, beforeWrite, readFree: options.readFree, idleStepsMs: options.idleStepsMs, cutPages: options.cutPages });
    const parts = {
      journal: this.#journal,
      pending: this.#pending,
      removes: this.#removes,
      counts: this.#counts,
      delays: this.#delays,
      meta: this.#meta,
      writes: this.#writes,
      rows: this.#rows,
      health: this.#health,
      space: this.#space,
      stats: this.stats,
    };
    this.#commit = new GroupCommit(parts, {
      journaling: options.journal ?? true,
      commitIntervalMs: this.#commitIntervalMs,
      retryIntervalMs,
      beforeCommit: options.beforeCommit,
      onCommit: options.onCommit,
      lastSeq: () => this.#nextSeq - 1,
      closed: () => this.#closed,
      pending: () => this.pending,
    });
    this.#log.info("store", `directory=${this.directory};mode=${this.mode};version=${STORE_VERSION};store opened`);
  }

  /** False from a failed commit until the next successful one. */
  get healthy(): boolean {
    return this.#health.healthy;
  }

  /** Appends, removes, delivery counts, delays and meta values waiting for the next commit. */
  get pending(): number {
    return this.#pending.size + this.#removes.size + this.#journal.pendingRemoves + this.#counts.pending + this.#delays.size + this.#meta.pending;
  }

  /** `mode` overrides the store's mode for this message (a channel's own durability). */
  append(message: StoredMessage, mode: DurableMode = this.mode): void | Promise<void> {
    if (this.#closed) throw new KittenError("STORE_UNAVAILABLE", `Cannot use the store in "${this.directory}": it is closed`);
    // Batch mode confirms at once: while the disk fails, the only honest answer is no. And while
    // the reserve is in use, the room it gave is for acks (space.ts): fsync appends are refused too.
    const short = this.#space.short;
    if (short || (mode === "batch" && !this.#health.healthy && !this.#probe())) {
      this.stats.refused++;
      const cannot = `Cannot write to the store in "${this.directory}"`;
      const refusal = (short && this.#space.refusal(cannot)) || new KittenError("STORE_UNAVAILABLE", `${cannot}: ${this.#health.lastError}`);
      if (mode === "batch") throw refusal;
      return Promise.reject(refusal);
    }
    const seq = this.#nextSeq++;
    message.position = seq;
    const batch = this.#pending.add(seq, message, mode);
    if (batch === undefined) this.#commit.timer.within(this.#commitIntervalMs);
    else this.#commit.timer.soon();
    return batch;
  }

  remove(message: StoredMessage): void {
    if (this.#closed) return; // Still on disk: delivered again after a restart (at least once).
    const seq = message.position;
    if (seq === undefined) return;
    message.position = undefined;
    this.#counts.forget(message);
    this.#delays.forget(message);
    if (this.#pending.cancel(seq)) {
      this.stats.cancelled++;
      return;
    }
    if (this.#journal.remove(seq, message)) {
      this.#commit.timer.within(this.#commitIntervalMs);
      return;
    }
    this.#removes.add(seq, message);
    this.#commit.timer.within(this.#commitIntervalMs);
  }

  /**
   * Remembers the highest delivery count of a message (the appended or loaded object) for the next
   * commit; no I/O here. Ignored for a closed store; a message the store does not hold (never
   * appended, or removed already) is dropped at that commit.
   */
  noteDelivery(message: StoredMessage, deliveries: number): void {
    if (this.#closed) return;
    // The first count since the last commit asks for one soon: it stamps when they were noted.
    if (this.#counts.note(message, deliveries)) this.#commit.timer.within(this.#commitIntervalMs);
  }

  /**
   * Remembers when a nacked message's delay ends (the appended or loaded object), and the count
   * it was nacked after, for the next commit; no I/O here. Ignored for a closed store or a
   * message it does not hold.
   */
  noteDelay(message: StoredMessage, notBefore: number, deliveries = 0): void {
    if (this.#closed || message.position === undefined) return;
    this.#delays.note(message, notBefore);
    if (deliveries > 0) this.#counts.dueNow(message, deliveries);
    this.#commit.timer.within(this.#commitIntervalMs);
  }

  /** Every message not removed, in arrival order. Commits what is pending first. */
  load(): StoredMessage[] {
    return [...this.scan()];
  }

  /** The ids of the `limit` newest messages stored (the journal's, then the database's), oldest first. */
  newestIds(limit: number): string[] {
    this.#open();
    const journaled: string[] = [];
    for (const [, message] of this.#journal.live()) journaled.push(message.id);
    if (journaled.length >= limit) return journaled.slice(journaled.length - limit);
    // Every journaled position is above every row's.
    return [...this.#rows.newestIds(limit - journaled.length), ...journaled];
  }

  /**
   * True when a committed message with this id is stored and not being removed (a slave's check
   * for paged messages: a row whose delete is pending is as good as gone).
   */
  holds(messageId: string): boolean {
    return !this.#closed && (this.#journal.holds(messageId) || this.#removes.holds(messageId));
  }

  /** Every message not removed, in arrival order, read lazily. Commits what is pending first. */
  *scan(): IterableIterator<StoredMessage> {
    this.#open();
    this.#commit.settle(true);
    // Left only when the settle just failed: journaled positions follow every row's.
    const journaled = [...this.#journal.live()].map(([, message]) => message);
    const pending = [...this.#pending.messages.values()];
    yield* this.#rows.scan();
    yield* journaled;
    yield* pending;
  }

  positionOf(message: StoredMessage): number | undefined {
    return message.position;
  }

  readQueue(queue: string, from: number, limit: number): StoredMessage[] {
    this.#open();
    // Journaled messages and batch-mode appends are confirmed already: they must be readable.
    if (this.#pending.size > 0 || this.#journal.liveCount > 0) this.#commit.settle(false);
    // A commit that failed leaves appends out: reading past them would skip confirmed messages.
    if (this.#pending.size > 0) throw this.#health.unavailable(this.#health.lastError);
    // A settle that failed (a full disk) leaves journaled messages, each after every row.
    return this.#journal.readAfter(this.#rows.read(queue, from, limit), queue, from, limit);
  }

  lastPosition(queue: string): number {
    this.#open();
    if (this.#journal.liveCount > 0) this.#commit.settle(false);
    // Left only when the settle failed: journaled positions are higher than every row's.
    return this.#journal.lastPosition(queue) ?? this.#rows.lastPosition(queue);
  }

  purgeFrom(queue: string, from: number, destination?: string): number {
    this.#open();
    this.#commit.settle(true); // pending and journaled rows are committed, so they are measured and deleted with the rest
    try {
      return this.#rows.purgeFrom(queue, from, destination);
    } catch (error) {
      throw this.#health.unavailable(error);
    }
  }

  /** Writes a meta value with the next commit (asked for within commitIntervalMs); the latest value per key wins. */
  setMetaWithNextCommit(key: string, value: MetaValue): void {
    this.#open();
    this.#meta.setWithNextCommit(key, value);
    this.#commit.timer.within(this.#commitIntervalMs);
  }

  usage = (): Map<string, QueueUsage> => this.#rows.usage.all();
  queueUsage = (queue: string): QueueUsage => this.#rows.usage.get(queue);

  #open(): void {
    if (this.#closed) throw new KittenError("STORE_UNAVAILABLE", `Cannot use the store in "${this.directory}": it is closed`);
  }

  /** One bounded step of giving disk space back (space.ts); the broker's tick calls it. */
  reclaim(): void {
    if (!this.#closed) this.#space.reclaim();
  }

  /** While the reserve is in use (the disk filled up), new messages are refused: its room is for acks. */
  refusal(channel: string): KittenError | null {
    // Checked on every durable send: the message is built only for a refusal.
    if (!this.#space.short) return null;
    return this.#space.refusal(`Cannot send to "${channel}": the store in "${this.directory}" refuses new messages`);
  }

  /** A meta value (`epoch`, `store_version`, …), or null. */
  meta(key: string): MetaValue | null {
    this.#open();
    return this.#meta.get(key);
  }

  /** Writes a meta value in its own transaction, on disk when this returns. */
  setMeta(key: string, value: MetaValue): void {
    this.#open();
    try {
      this.#meta.set(key, value);
    } catch (error) {
      throw this.#health.unavailable(error);
    }
  }

  /** Commits what is pending (its failure is reported like any commit's), then closes. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#commit.settle(true); // a clean stop leaves the journal empty (one that fails keeps it, read at the next open)
    this.#closed = true;
    this.#commit.timer.clear();
    const lost = this.#pending.size;
    if (lost > 0) {
      this.#log.error("store", `directory=${this.directory};messages=${lost};confirmed messages not written at close`);
    }
    this.#pending.clear();
    this.#removes.clear();
    this.#counts.clear(); // Left only when the last commit failed: the disk keeps older counts.
    this.#delays.clear();
    this.#meta.clear();
    this.#log.info("store", `directory=${this.directory};${describeStats(this.stats)};store closed`);
    try {
      // Unfinalized statements would keep the connection (and its exclusive lock) open after close.
      this.#writes.finalize();
      this.#rows.finalize();
      this.#removes.ids.finalize();
      this.#space.finalize();
      this.#journal.close();
      this.#db.close(true); // Checkpoints the WAL into the database file and deletes it.
    } catch (error) {
      this.#log.error("store", `directory=${this.directory};close failed: ${describe(error)}`);
    }
  }

  /** A batch-mode append to a failing store with nothing to retry tries one small write (health.ts). */
  #probe(): boolean {
    return this.#health.probe(this.pending, () => this.#meta.set("opened", Date.now()));
  }

}

