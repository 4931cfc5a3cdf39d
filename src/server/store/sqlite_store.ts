/**
 * The durable store: one bun:sqlite database in WAL mode under the data directory (format in
 * record.ts).
 *
 * Group commit: `append` and `remove` only record what to do, and one transaction per event-loop
 * turn writes everything gathered since the last one, so one fsync serves every message that
 * arrived meanwhile. bun:sqlite is synchronous, so a commit blocks the loop for its duration, once
 * per batch and not per message: about 1.2 µs per row plus about 1 ms for COMMIT (WAL write and
 * fsync), so 2–3 ms for 1000 messages; a WAL checkpoint (every 1 MiB of WAL, which is then cut
 * back to 1 MiB) adds a few ms to one commit (scripts/store_probe.ts).
 *
 * - `"fsync"` mode: appends are committed on the next turn (`setImmediate`) with
 *   `synchronous=FULL`; `append` returns a promise, shared by every message of the batch, that
 *   resolves once the commit is on disk. Removes alone wait for `commitIntervalMs` (or ride along
 *   with the next appends): nobody waits for them, and their commits are not fsynced (see
 *   CommitSync in database.ts: a process killed keeps them, as the OS has them; power loss may bring acked
 *   messages back).
 * - `"batch"` mode: `append` returns nothing (the broker confirms at once) and everything is
 *   committed every `commitIntervalMs`. A crash loses at most the last interval.
 * - A remove whose append is still pending cancels both: the message never touches the disk.
 * - Meta values: `setMeta` writes at once, `setMetaWithNextCommit` with the next commit (meta_values.ts).
 * - Delivery counts (`noteDelivery`) are written for messages still unacked a while after their
 *   delivery (delivery_counts.ts); a nack's delay (`noteDelay`) with the next commit (pending_delays.ts).
 *
 * Failures (disk full, read-only, I/O error): the failed transaction is rolled back and `healthy`
 * turns false. In fsync mode the batch's promise rejects with `STORE_UNAVAILABLE` (nothing of it
 * is confirmed) and later appends are still attempted, so the first commit that succeeds again
 * restores health. In batch mode the already confirmed batch stays pending and is retried every
 * `retryIntervalMs`; new appends are refused (`append` throws) until a commit succeeds. Pending
 * removes and delivery counts are kept and retried in both modes. A full disk, the reserve and
 * the space given back are space.ts's. A disk already full at open does not stop the store from opening: it starts unhealthy, serves
 * what it holds, and refuses new sends until a write succeeds.
 *
 * The database is opened with `locking_mode=EXCLUSIVE`: a second broker on the same directory is
 * refused instead of corrupting the first one's queues (and no `-shm` file is needed).
 */
import type { Database, Statement } from "bun:sqlite";
import { join } from "node:path";
import { KittenError } from "../../protocol/errors.ts";
import { STORE_VERSION } from "../../version.ts";
import { Logger } from "../log.ts";
import { CommitSync, describe, describeStats, isDiskFull, newStats, openDatabase, type SqliteStoreOptions, type SqliteStoreStats } from "./database.ts";
import { CommitTimer } from "./commit_timer.ts";
import { DeliveryCounts } from "./delivery_counts.ts";
import { type MetaValue, STORE_FILE } from "./record.ts";
import { MetaValues } from "./meta_values.ts";
import { HeldIds } from "./held_ids.ts";
import { PendingDelays } from "./pending_delays.ts";
import { RowWrites } from "./row_writes.ts";
import type { DurableMode, PagingStore, QueueUsage, StoredMessage } from "./store.ts";
import { QueueRows } from "./queue_rows.ts";
import { StoreSpace } from "./space.ts";
import { UsageDelta } from "./usage.ts";

export type { DurableMode } from "./store.ts";
export { DELIVERY_COUNT_DELAY_MS } from "./delivery_counts.ts";
export { type SqliteStoreOptions, type SqliteStoreStats, WAL_CHECKPOINT_PAGES, WAL_SIZE_LIMIT } from "./database.ts";

/**
 * Deletes are cheap but not free (2–3 µs each): a consumer acking a large backlog at once
 * is split into several commits so that no single one blocks the event loop for long. Delivery
 * count UPDATEs share the bound (deletes go first).
 */
export const MAX_DELETES_PER_COMMIT = 10_000;

export class SqliteStore implements PagingStore {
  readonly directory: string;
  readonly mode: DurableMode;
  readonly path: string;
  readonly stats: SqliteStoreStats = newStats();
  readonly #db: Database;
  readonly #log: Logger;
  readonly #commitIntervalMs: number;
  readonly #retryIntervalMs: number;
  readonly #beforeCommit: (() => void) | undefined;
  readonly #onCommit: ((elapsedMs: number) => void) | undefined;
  readonly #begin: Statement<unknown, []>;
  readonly #commit: Statement<unknown, []>;
  readonly #rollback: Statement<unknown, []>;
  readonly #writes: RowWrites;
  /** Reads and usage by queue (queue_rows.ts). */
  readonly #rows: QueueRows;
  /** Disk space: vacuum, truncating checkpoints, the reserve for a full disk (space.ts). */
  readonly #space: StoreSpace;
  /** Asked by id (a slave): the index by id, and the ids whose delete is pending. */
  readonly #ids: HeldIds;
  #nextSeq: number;
  /** Seqs of pending appends made in fsync mode: confirmed only by the commit that holds them. */
  readonly #unconfirmed = new Set<number>();
  /** Appends not yet committed, by seq, in arrival order. */
  #appends = new Map<number, StoredMessage>();
  /** Rows to delete in the next commit, and the messages they hold (for the usage figures). */
  #removes: number[] = [];
  #removed: StoredMessage[] = [];
  /** Delivery counts not written yet (see `deliveryCountDelayMs`). */
  readonly #counts: DeliveryCounts;
  /** Delayed requeues not written yet. */
  readonly #delays = new PendingDelays();
  /** The meta table's values, and those for the next commit. */
  readonly #meta: MetaValues;
  /** Whether the next commit is fsynced. */
  readonly #sync: CommitSync;
  /** Set while `#flushAll` commits everything: delivery counts not due yet too. */
  #forceCounts = false;
  /** Fsync mode: the promise every pending append returned. */
  #batch: PromiseWithResolvers<void> | null = null;
  /** When the next commit runs. */
  readonly #next: CommitTimer;
  #healthy = true;
  /** The SQLite error of the last failed commit (for refusals while unhealthy). */
  #lastError = "";
  #closed = false;
  /** When an unhealthy store with nothing to retry last tried a write (performance.now()). */
  #probedAt = -Infinity;

  constructor(options: SqliteStoreOptions) {
    this.directory = options.directory;
    this.mode = options.mode ?? "fsync";
    this.path = join(this.directory, STORE_FILE);
    this.#log = options.logger ?? new Logger();
    this.#commitIntervalMs = options.commitIntervalMs ?? 5;
    this.#retryIntervalMs = options.retryIntervalMs ?? 100;
    this.#beforeCommit = options.beforeCommit;
    this.#counts = new DeliveryCounts(options.deliveryCountDelayMs ?? 0);
    this.#onCommit = options.onCommit;
    this.#next = new CommitTimer(this.#flush);
    const opened = openDatabase(this.directory, this.path, this.#log, options.indexById ?? true);
    const db = opened.db;
    this.#healthy = opened.healthy;
    this.#lastError = opened.lastError;
    this.#nextSeq = opened.nextSeq;
    this.#db = db;
    this.#begin = db.prepare("BEGIN");
    this.#commit = db.prepare("COMMIT");
    this.#rollback = db.prepare("ROLLBACK");
    this.#writes = new RowWrites(db);
    this.#rows = new QueueRows(db);
    this.#ids = new HeldIds(db, opened.indexedById, this.#log, this.directory);
    this.#meta = new MetaValues(db);
    this.#sync = new CommitSync(db);
    const beforeWrite = () => this.#sync.set(false);
    this.#space = new StoreSpace(db, { directory: this.directory, log: this.#log, stats: this.stats, beforeWrite, readFree: options.readFree });
    this.#log.info("store", `directory=${this.directory};mode=${this.mode};version=${STORE_VERSION};store opened`);
  }

  /** False from a failed commit until the next successful one. */
  get healthy(): boolean {
    return this.#healthy;
  }

  /** Appends, removes, delivery counts, delays and meta values waiting for the next commit. */
  get pending(): number {
    return this.#appends.size + this.#removes.length + this.#counts.pending + this.#delays.size + this.#meta.pending;
  }

  /** `mode` overrides the store's mode for this message (a channel's own durability). */
  append(message: StoredMessage, mode: DurableMode = this.mode): void | Promise<void> {
    if (this.#closed) throw new KittenError("STORE_UNAVAILABLE", `Cannot use the store in "${this.directory}": it is closed`);
    // Batch mode confirms at once: while the disk fails, the only honest answer is no. And while
    // the reserve is in use, the room it gave is for acks (space.ts): fsync appends are refused too.
    const short = this.#space.short;
    if (short || (mode === "batch" && !this.#healthy && !this.#probe())) {
      this.stats.refused++;
      const cannot = `Cannot write to the store in "${this.directory}"`;
      const refusal = (short && this.#space.refusal(cannot)) || new KittenError("STORE_UNAVAILABLE", `${cannot}: ${this.#lastError}`);
      if (mode === "batch") throw refusal;
      return Promise.reject(refusal);
    }
    const seq = this.#nextSeq++;
    message.position = seq;
    this.#appends.set(seq, message);
    if (mode === "fsync") this.#unconfirmed.add(seq);
    if (mode === "batch") {
      this.#next.within(this.#commitIntervalMs);
      return;
    }
    this.#next.soon();
    this.#batch ??= Promise.withResolvers<void>();
    return this.#batch.promise;
  }

  remove(message: StoredMessage): void {
    if (this.#closed) return; // Still on disk: delivered again after a restart (at least once).
    const seq = message.position;
    if (seq === undefined) return;
    message.position = undefined;
    this.#counts.forget(message);
    this.#delays.forget(message);
    if (this.#appends.delete(seq)) {
      this.#unconfirmed.delete(seq);
      this.stats.cancelled++;
      return;
    }
    this.#removes.push(seq);
    this.#removed.push(message);
    this.#ids.removing(message.id);
    this.#next.within(this.#commitIntervalMs);
  }

  /**
   * Remembers the highest delivery count of a message (the appended or loaded object) for the next
   * commit; no I/O here. Ignored for a closed store; a message the store does not hold (never
   * appended, or removed already) is dropped at that commit.
   */
  noteDelivery(message: StoredMessage, deliveries: number): void {
    if (this.#closed) return;
    // The first count since the last commit asks for one soon: it stamps when they were noted.
    if (this.#counts.note(message, deliveries)) this.#next.within(this.#commitIntervalMs);
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
    this.#next.within(this.#commitIntervalMs);
  }

  /** Every message not removed, in arrival order. Commits what is pending first. */
  load(): StoredMessage[] {
    return [...this.scan()];
  }

  /**
   * True when a committed message with this id is stored and not being removed (a slave's check
   * for paged messages: a row whose delete is pending is as good as gone).
   */
  holds(messageId: string): boolean {
    return !this.#closed && this.#ids.holds(messageId, this.#removed);
  }

  /** Every message not removed, in arrival order, read lazily. Commits what is pending first. */
  *scan(): IterableIterator<StoredMessage> {
    this.#open();
    this.#flushAll();
    const pending = [...this.#appends.values()]; // left only when the commit just failed
    yield* this.#rows.scan();
    yield* pending;
  }

  positionOf(message: StoredMessage): number | undefined {
    return message.position;
  }

  readQueue(queue: string, from: number, limit: number): StoredMessage[] {
    this.#open();
    if (this.#appends.size > 0) this.#flush(); // batch mode confirmed them already: they must be readable
    // A commit that failed leaves them pending: reading past them would skip confirmed messages.
    if (this.#appends.size > 0) throw this.#unavailable(this.#lastError);
    return this.#rows.read(queue, from, limit);
  }

  lastPosition(queue: string): number {
    this.#open();
    return this.#rows.lastPosition(queue);
  }

  purgeFrom(queue: string, from: number, destination?: string): number {
    this.#open();
    this.#flushAll(); // pending rows are committed, so they are measured and deleted with the rest
    try {
      return this.#rows.purgeFrom(queue, from, destination);
    } catch (error) {
      throw this.#unavailable(error);
    }
  }

  /** Writes a meta value with the next commit (asked for within commitIntervalMs); the latest value per key wins. */
  setMetaWithNextCommit(key: string, value: MetaValue): void {
    this.#open();
    this.#meta.setWithNextCommit(key, value);
    this.#next.within(this.#commitIntervalMs);
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
      throw this.#unavailable(error);
    }
  }

  /** Commits what is pending (its failure is reported like any commit's), then closes. Idempotent. */
  close(): void {
    if (this.#closed) return;
    this.#flushAll();
    this.#closed = true;
    this.#next.clear();
    const lost = this.#appends.size;
    if (lost > 0) {
      this.#log.error("store", `directory=${this.directory};messages=${lost};confirmed messages not written at close`);
    }
    this.#appends.clear();
    this.#removes = [];
    this.#removed = [];
    this.#ids.clear();
    this.#counts.clear(); // Left only when the last commit failed: the disk keeps older counts.
    this.#delays.clear();
    this.#meta.clear();
    this.#log.info("store", `directory=${this.directory};${describeStats(this.stats)};store closed`);
    try {
      // Unfinalized statements would keep the connection (and its exclusive lock) open after close.
      for (const statement of [this.#begin, this.#commit, this.#rollback]) statement.finalize();
      this.#writes.finalize();
      this.#rows.finalize();
      this.#ids.finalize();
      this.#space.finalize();
      this.#db.close(true); // Checkpoints the WAL into the database file and deletes it.
    } catch (error) {
      this.#log.error("store", `directory=${this.directory};close failed: ${describe(error)}`);
    }
  }

  /** Commits until nothing is pending or a commit fails. */
  #flushAll(): void {
    this.#forceCounts = true;
    try {
      do this.#flush();
      while (
        this.#healthy &&
        (this.#removes.length > 0 || this.#counts.due.size > 0 || this.#counts.hasRecent || this.#delays.size > 0 || this.#meta.pending > 0)
      );
    } finally {
      this.#forceCounts = false;
    }
  }

  #unavailable(error: unknown): KittenError {
    return new KittenError("STORE_UNAVAILABLE", `Cannot write to the store in "${this.directory}": ${describe(error)}`, undefined, {
      cause: error,
    });
  }

  /** One transaction for everything pending. Synchronous; runs from a timer, an immediate, load or close. */
  readonly #flush = (): void => {
    this.#next.clear();
    const counts = this.#counts;
    counts.ripen(this.#forceCounts);
    const appends = this.#appends;
    const removes = this.#removes;
    const batch = this.#batch;
    this.#batch = null;
    const deletes = Math.min(removes.length, MAX_DELETES_PER_COMMIT);
    // Delivery counts: an UPDATE for a stored row (deletes and updates share the per-commit bound),
    // the INSERT for a pending append, nothing for a message the store no longer holds.
    const written = counts.updatesFor(appends, MAX_DELETES_PER_COMMIT - deletes);
    const updates = written.updates;
    const updateCount = written.updated === null ? 0 : written.updated.length;
    const delays = this.#delays.updatesFor(appends, Math.max(0, MAX_DELETES_PER_COMMIT - deletes - updateCount));
    const delayCount = delays.updates === null ? 0 : delays.updates.length / 2;
    const operations = appends.size + deletes + updateCount + delayCount + this.#meta.pending;
    if (operations === 0) {
      batch?.resolve(); // Every append of it was cancelled.
      this.#comeBackForCounts();
      return;
    }
    const started = performance.now();
    const usage = new UsageDelta();
    try {
      this.#sync.set(appends.size > 0);
      this.#begin.run();
      this.#writes.insert(appends, (message) => counts.forAppend(message), (message) => this.#delays.forAppend(message));
      for (const message of appends.values()) usage.add(message, 1);
      if (deletes > 0) this.#writes.delete(removes, deletes);
      for (let i = 0; i < deletes; i++) usage.add(this.#removed[i]!, -1);
      this.#rows.writeUsage(usage);
      if (updates !== null) this.#writes.update(updates);
      if (delays.updates !== null) this.#writes.updateNotBefore(delays.updates);
      this.#meta.writePending();
      this.#beforeCommit?.();
      this.#commit.run();
    } catch (error) {
      if (this.#db.inTransaction) {
        try {
          this.#rollback.run();
        } catch {
          // SQLite may have rolled back already (SQLITE_FULL and I/O errors do).
        }
      }
      this.#failed(error, batch);
      return;
    }
    const elapsed = performance.now() - started;
    const stats = this.stats;
    stats.commits++;
    stats.inserted += appends.size;
    stats.deleted += deletes;
    stats.updates += updateCount + delayCount;
    stats.lastCommitMs = elapsed;
    stats.commitMs += elapsed;
    if (elapsed > stats.maxCommitMs) stats.maxCommitMs = elapsed;
    this.#onCommit?.(elapsed);
    if (operations > stats.largestBatch) stats.largestBatch = operations;
    counts.committed(written, appends);
    this.#delays.committed(delays);
    this.#appends = new Map();
    this.#meta.clear();
    this.#unconfirmed.clear();
    this.#rows.usage.apply(usage);
    this.#ids.deleted(this.#removed, deletes);
    this.#removes = deletes === removes.length ? [] : removes.slice(deletes);
    this.#removed = deletes === removes.length ? [] : this.#removed.slice(deletes);
    if (this.#removes.length > 0 || written.deferred || delays.deferred) this.#next.soon();
    else this.#comeBackForCounts();
    if (!this.#healthy) {
      this.#healthy = true;
      this.#log.info("store", `directory=${this.directory};store writable again`);
    }
    batch?.resolve();
  };

  /** Delivery counts not due yet: a commit comes back when the oldest are (delivery_counts.ts). */
  #comeBackForCounts(): void {
    const dueInMs = this.#counts.nextDueInMs();
    if (dueInMs !== null) this.#next.within(Math.max(this.#commitIntervalMs, dueInMs));
  }

  #failed(error: unknown, batch: PromiseWithResolvers<void> | null): void {
    const failure = this.#unavailable(error);
    this.stats.failedCommits++;
    if (isDiskFull(error)) this.#space.diskFull();
    this.#lastError = describe(error);
    if (this.#healthy) {
      this.#healthy = false;
      this.#log.error("store", `directory=${this.directory};commit failed, sends refused until it recovers: ${this.#lastError}`);
    }
    // fsync appends are not confirmed yet: their senders are told, and the rows are forgotten.
    // Batch appends were confirmed already: they stay pending and are retried.
    for (const seq of this.#unconfirmed) {
      this.#appends.get(seq)!.position = undefined;
      this.#appends.delete(seq);
    }
    this.stats.refused += this.#unconfirmed.size;
    this.#unconfirmed.clear();
    batch?.reject(failure);
    if (!this.#closed && this.pending > 0) this.#next.within(this.#retryIntervalMs);
  }

  /**
   * Unhealthy with nothing pending (the disk was full at open, or every failed append was
   * rejected): no retry will come, so a batch-mode append tries one small write itself, at most
   * once per retry interval. True when the store can write again.
   */
  #probe(): boolean {
    const now = performance.now();
    if (this.pending > 0 || now - this.#probedAt < this.#retryIntervalMs) return false;
    this.#probedAt = now;
    try {
      this.#meta.set("opened", Date.now());
    } catch (error) {
      this.#lastError = describe(error);
      return false;
    }
    this.#healthy = true;
    this.#log.info("store", `directory=${this.directory};store writable again`);
    return true;
  }
}

