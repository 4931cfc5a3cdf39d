/**
 * The durable store's commit (sqlite_store.ts): one commit writes everything gathered since the
 * last one. The appends go to the journal, in one fsynced frame with the removes of journaled
 * messages, unless the commit settles it (a read needs the messages in the database, a count or a
 * delay is due, the journal holds too many, or the store is failing); the database's transaction
 * has the rest: deletes, delivery counts, delays, meta values and the usage table.
 *
 * It owns when the next commit runs (`timer`, commit_timer.ts) and whether one must settle; the
 * store records what to do and asks for a commit.
 */
import { countCommit, isDiskFull, type SqliteStoreStats } from "./database.ts";
import { CommitTimer } from "./commit_timer.ts";
import type { DeliveryCounts } from "./delivery_counts.ts";
import type { StoreHealth } from "./health.ts";
import { type Journal, JOURNAL_THROUGH } from "./journal.ts";
import type { MetaValues } from "./meta_values.ts";
import type { PendingAppends } from "./pending_appends.ts";
import type { PendingDelays } from "./pending_delays.ts";
import type { PendingRemoves } from "./pending_removes.ts";
import type { QueueRows } from "./queue_rows.ts";
import type { RowChanges, RowWrites } from "./row_writes.ts";
import type { StoreSpace } from "./space.ts";
import type { StoredMessage } from "./store.ts";
import { UsageDelta } from "./usage.ts";

/**
 * Deletes cost 2–3 µs each: acks of a large backlog at once are split into several commits, so
 * that none blocks the event loop for long. Count UPDATEs share the bound (deletes go first).
 */
export const MAX_DELETES_PER_COMMIT = 10_000;

/** A commit whose appends went to the journal inserts none. */
const NO_APPENDS: Map<number, StoredMessage> = new Map();

/** The parts of the store a commit writes from and to. */
export interface CommitParts {
  readonly journal: Journal;
  readonly pending: PendingAppends;
  readonly removes: PendingRemoves;
  readonly counts: DeliveryCounts;
  readonly delays: PendingDelays;
  readonly meta: MetaValues;
  readonly writes: RowWrites;
  readonly rows: QueueRows;
  readonly health: StoreHealth;
  readonly space: StoreSpace;
  readonly stats: SqliteStoreStats;
}

export interface CommitOptions {
  /** False: every commit writes the database (no journal). */
  readonly journaling: boolean;
  readonly commitIntervalMs: number;
  readonly retryIntervalMs: number;
  readonly beforeCommit?: () => void;
  readonly onCommit?: (elapsedMs: number) => void;
  /** The last position given to an append. */
  lastSeq(): number;
  /** True once the store is closed: a failed commit is not retried. */
  closed(): boolean;
  /** Everything waiting for a commit (the store's `pending`). */
  pending(): number;
}

export class GroupCommit {
  /** When the next commit runs. */
  readonly timer: CommitTimer;
  /** A read needs every message in the database (`settle`). */
  #settleAsked = false;
  /** Set while `all()` commits everything: delivery counts not due yet too. */
  #forceCounts = false;

  constructor(readonly parts: CommitParts, readonly options: CommitOptions) {
    this.timer = new CommitTimer(this.run);
  }

  /** Commits until nothing is pending or a commit fails. */
  all(): void {
    const { removes, journal, counts, delays, meta, health } = this.parts;
    this.#forceCounts = true;
    try {
      do this.run();
      while (
        health.healthy &&
        (removes.size > 0 || journal.pendingRemoves > 0 || counts.due.size > 0 || counts.hasRecent || delays.size > 0 || meta.pending > 0)
      );
    } finally {
      this.#forceCounts = false;
    }
  }

  /**
   * Moves every journaled message into the database (a read needs them there, or the store
   * closes): one commit, or with `all` every commit until nothing is pending or one fails.
   */
  settle(all: boolean): void {
    this.#settleAsked = true;
    try {
      if (all) this.all();
      else this.run();
    } finally {
      this.#settleAsked = false;
    }
  }

  /**
   * One commit of everything pending. Synchronous; runs from the timer, an immediate, a read or
   * close.
   */
  readonly run = (): void => {
    const { journal, pending: appending, removes, counts, delays, meta, writes, rows, health, stats } = this.parts;
    this.timer.clear();
    counts.ripen(this.#forceCounts);
    let batch = appending.takeBatch();
    const pending = appending.messages;
    // A failing store writes the database only: a commit that succeeds there restores it.
    const settle = !this.options.journaling || !health.healthy || this.#settleAsked || journal.full;
    let appends = pending;
    let through = this.options.lastSeq();
    if (settle) {
      if (journal.liveCount > 0) appends = new Map([...journal.live(), ...appends]); // journaled positions come first
    } else {
      if (appends.size > 0 || journal.pendingRemoves > 0) {
        if (!this.#writeJournal(appends, batch)) return;
        batch = null;
      }
      // Counts and delays are columns of a row: settled up to the last message with one due (journal.ts).
      const due = journal.rowlessThrough(delays.messages(), pending, journal.rowlessThrough(counts.due.keys(), pending));
      const oldest = journal.toSettle(due);
      appends = oldest?.messages ?? NO_APPENDS;
      through = oldest?.through ?? 0;
    }
    const settling = appends !== pending && appends !== NO_APPENDS;
    const journaled = settling ? appends.size - appending.size : 0;
    const deletes = Math.min(removes.size, MAX_DELETES_PER_COMMIT);
    // Delivery counts: an UPDATE for a stored row (deletes and updates share the per-commit bound),
    // the INSERT for a pending append, nothing for a message the store no longer holds.
    const written = counts.updatesFor(appends, MAX_DELETES_PER_COMMIT - deletes);
    const updates = written.updates;
    const updateCount = written.updated === null ? 0 : written.updated.length;
    const delayed = delays.updatesFor(appends, Math.max(0, MAX_DELETES_PER_COMMIT - deletes - updateCount));
    const delayCount = delayed.updates === null ? 0 : delayed.updates.length / 2;
    const operations = appends.size + deletes + updateCount + delayCount + meta.pending;
    if (operations === 0) {
      if (settle && journal.size > 0) journal.settled(); // every message in it was removed
      batch?.resolve(); // Every append of it was cancelled.
      this.#comeBackForCounts();
      return;
    }
    const started = performance.now();
    const table = new UsageDelta(); // the queue_usage rows
    const memory = new UsageDelta(); // rows.usage, which counts journaled messages already
    for (const message of appends.values()) table.add(message, 1);
    for (const message of appending.messages.values()) memory.add(message, 1); // none left if journaled
    for (let i = 0; i < deletes; i++) {
      table.add(removes.messages[i]!, -1);
      memory.add(removes.messages[i]!, -1);
    }
    const changes: RowChanges = {
      appends,
      deliveries: (message) => counts.forAppend(message),
      notBefore: (message) => delays.forAppend(message),
      removes: removes.seqs,
      deletes,
      updates,
      delays: delayed.updates,
      journalThrough: journaled > 0 ? { key: JOURNAL_THROUGH, seq: through } : null,
    };
    try {
      writes.transaction(changes, () => {
        rows.writeUsage(table);
        meta.writePending();
        this.options.beforeCommit?.();
      });
    } catch (error) {
      this.#failed(error, batch);
      return;
    }
    const elapsed = performance.now() - started;
    countCommit(stats, elapsed, { inserted: appends.size, deleted: deletes, updates: updateCount + delayCount, operations });
    this.options.onCommit?.(elapsed);
    if (settle && (journaled > 0 || journal.size > 0)) journal.settled();
    else if (settling) journal.settledThrough(through);
    if (journaled > 0) stats.settles++;
    counts.committed(written, appends);
    delays.committed(delayed);
    if (settle) appending.committed();
    meta.clear();
    rows.usage.apply(memory);
    removes.committed(deletes);
    if (removes.size > 0 || written.deferred || delayed.deferred) this.timer.soon();
    else this.#comeBackForCounts();
    health.writable();
    batch?.resolve();
  };

  /**
   * Writes the appends and the journal's pending removes as one journal frame (fsynced when there
   * are appends): true when written, and then the appends are confirmed.
   */
  #writeJournal(appends: Map<number, StoredMessage>, batch: PromiseWithResolvers<void> | null): boolean {
    try {
      this.options.beforeCommit?.();
      const started = performance.now();
      this.parts.journal.write(appends); // no count or delay is due: the commit would settle
      if (appends.size > 0) this.options.onCommit?.(performance.now() - started);
    } catch (error) {
      this.#failed(error, batch);
      return false;
    }
    this.parts.pending.committed();
    this.parts.health.writable();
    batch?.resolve();
    return true;
  }

  /** Delivery counts not due yet: a commit comes back when the oldest are (delivery_counts.ts). */
  #comeBackForCounts(): void {
    const dueInMs = this.parts.counts.nextDueInMs();
    if (dueInMs !== null) this.timer.within(Math.max(this.options.commitIntervalMs, dueInMs));
  }

  #failed(error: unknown, batch: PromiseWithResolvers<void> | null): void {
    const { stats, space, health, pending } = this.parts;
    stats.failedCommits++;
    if (isDiskFull(error)) space.diskFull();
    const failure = health.failed(error);
    // fsync appends are not confirmed yet: their senders are told, and the rows are forgotten.
    // Batch appends were confirmed already: they stay pending and are retried.
    stats.refused += pending.failed();
    batch?.reject(failure);
    if (!this.options.closed() && this.options.pending() > 0) this.timer.within(this.options.retryIntervalMs);
  }
}
