/**
 * Where this broker's replication log stands, and what of it a restart may go on from: the epoch
 * table (history.ts), the newest entries in memory (log_tail.ts), and the last index known to be
 * on disk, kept in the store's meta table (`logHistory`, `logIndex`).
 *
 * The index saved is a lower bound of what the store holds: entries are idempotent (an APPEND of
 * a message held already adds nothing, a REMOVE of one gone removes nothing), so catching up from
 * a lower index costs a few entries more and never changes the outcome. A master saves the index
 * every in-sync replica holds and its own store committed (a restarted master then never claims
 * entries the next master may lack); a slave saves the index it acknowledged. Saved about once a
 * second, with the store's next commit (a crash before it leaves the older index, still a lower
 * bound); a new history, and the positions a resume, a snapshot or a stop set, are written at once.
 *
 * A stop that saved the position says so (`logClean`). After a kill -9 the index saved is older
 * than the log this broker went on to write: its store may hold messages of entries after it, and
 * a slave may hold those entries. Such a start is `uncertainAfter` that index until this broker
 * catches up from a master again: as master it cannot tell a slave ahead of it which entries they
 * share, so it sends a snapshot rather than have the slave undo them (replication.ts).
 */
import type { PeerPosition } from "../../protocol/peer_ops.ts";
import type { Store } from "../store/store.ts";
import { type EpochStart, EpochHistory } from "./history.ts";
import { LogTail } from "./log_tail.ts";

/** How often the position is written while it moves (ms). */
const SAVE_EVERY_MS = 1_000;
const HISTORY_KEY = "logHistory";
const INDEX_KEY = "logIndex";
const CLEAN_KEY = "logClean";

export class LogPositions {
  readonly history: EpochHistory;
  readonly tail: LogTail;
  /** The last index stored here (acknowledged, as a slave); -1: none is known. */
  storedIndex: number;
  /** As a master: the last index whose append this broker's store committed. */
  committedIndex = 0;
  /**
   * Set when the last run did not stop cleanly (a kill -9, a crash): the saved index, after which
   * this broker's log is unknown. Null once it caught up from a master, or after a clean stop.
   */
  uncertainAfter: number | null = null;
  #saved: number;
  #savedAt = 0;
  /** The history as last written (JSON). */
  #savedHistory = "";

  constructor(
    readonly store: Store | null,
    readonly log: (level: "info" | "warn" | "error", message: string) => void,
  ) {
    const { history, index, clean } = this.#load();
    this.history = new EpochHistory(history);
    this.#savedHistory = JSON.stringify(history);
    this.storedIndex = index;
    this.#saved = index;
    this.tail = new LogTail(Math.max(0, index));
    if (!clean) this.uncertainAfter = Math.max(0, index);
    this.#markRunning();
  }

  /** Until a clean stop says otherwise, a restart must not trust the saved index as this log's end. */
  #markRunning(): void {
    try {
      this.store?.setMeta(CLEAN_KEY, 0);
    } catch (error) {
      this.log("warn", `cannot record that the broker runs: ${(error as Error).message}`);
    }
  }

  /** The broker stops: the position saved now is where its log ends. */
  saveAtStop(index: number): void {
    this.save(index);
    try {
      this.store?.setMeta(CLEAN_KEY, 1);
    } catch (error) {
      this.log("warn", `cannot record a clean stop: ${(error as Error).message}`);
    }
  }

  /** The last index this broker holds (what a new term goes on from). */
  get lastIndex(): number {
    return Math.max(this.tail.last, this.storedIndex, 0);
  }

  /**
   * What a slave sends with SYNC: its history, where its log ends and how far back it can go
   * (what its tail holds). Undefined with no history: a store of an earlier version, or a new one.
   */
  position(): PeerPosition | undefined {
    if (this.history.epochs.length === 0) return undefined;
    if (this.tail.length === 0 && this.storedIndex < 0) return undefined;
    const index = this.tail.length > 0 ? this.tail.last : Math.max(this.storedIndex, this.tail.last);
    return { history: this.history.epochs, index, floor: Math.min(this.tail.base, index) };
  }

  /** As a master: the append at `index` is in this broker's store (or needs none). */
  committed(index: number): void {
    if (index > this.committedIndex) this.committedIndex = index;
  }

  /** The slave stored every entry up to `index`. */
  stored(index: number): void {
    if (index > this.storedIndex) this.storedIndex = index;
  }

  /**
   * The master resumes this slave from `from`: entries after it go (returned: the ids they
   * appended), and the log's history is the master's. Saved at once, so that a restart never
   * claims entries past `from` under the new history.
   */
  resume(from: number, epochs: EpochStart[]): string[] {
    const undone = this.tail.truncate(from);
    if (this.tail.last < from) this.tail.reset(from);
    this.history.adopt(epochs);
    this.storedIndex = Math.min(Math.max(this.storedIndex, 0), from);
    this.uncertainAfter = null; // its log is its master's up to `from` now
    this.save(this.storedIndex);
    return undone;
  }

  /**
   * A snapshot at `index` arrived: the log starts anew after it, with the master's history. Until
   * the snapshot is acknowledged as stored, no position is claimed.
   */
  restart(index: number, epochs: EpochStart[]): void {
    this.tail.reset(index);
    this.history.adopt(epochs);
    this.storedIndex = -1;
    this.uncertainAfter = null; // what it holds is the snapshot's
    this.save(-1);
  }

  /** Writes the position now (at most `index`; -1: none). */
  save(index: number): void {
    this.#saved = index;
    if (!this.store) return;
    try {
      const history = JSON.stringify(this.history.epochs);
      this.store.setMeta(HISTORY_KEY, history);
      this.#savedHistory = history;
      this.store.setMeta(INDEX_KEY, index);
    } catch (error) {
      // A full or failing disk: the older position stays, which is still a lower bound.
      this.log("warn", `cannot save the replication position ${index}: ${(error as Error).message}`);
    }
  }

  /**
   * Writes `index` when it moved and the last write is old enough, with the store's next commit.
   * A history that changed since it was written goes at once, before the index it covers.
   */
  saveSoon(index: number, now: number): void {
    if (index === this.#saved || now - this.#savedAt < SAVE_EVERY_MS) return;
    this.#savedAt = now;
    if (!this.store) {
      this.#saved = index;
      return;
    }
    if (JSON.stringify(this.history.epochs) !== this.#savedHistory) return this.save(index);
    try {
      this.store.setMetaWithNextCommit(INDEX_KEY, index);
      this.#saved = index;
    } catch (error) {
      this.log("warn", `cannot save the replication position ${index}: ${(error as Error).message}`);
    }
  }

  #load(): { history: EpochStart[]; index: number; clean: boolean } {
    const none = { history: [], index: -1, clean: true };
    if (!this.store) return none;
    const rawHistory = this.store.meta(HISTORY_KEY);
    const rawIndex = this.store.meta(INDEX_KEY);
    if (rawHistory === null || rawIndex === null) return none;
    // A store written before the marker existed counts as stopped cleanly.
    const clean = this.store.meta(CLEAN_KEY) !== 0;
    try {
      const history = JSON.parse(String(rawHistory)) as EpochStart[];
      const index = Number(rawIndex);
      const valid = Array.isArray(history) && history.every((pair) => Array.isArray(pair) && pair.length === 2) &&
        Number.isSafeInteger(index);
      if (valid) return { history, index, clean };
    } catch {
      // Unreadable: treated as no position (a snapshot), and said so.
    }
    this.log("warn", `the saved replication position is unreadable (${String(rawHistory)}, ${String(rawIndex)}): catching up from a snapshot`);
    return none;
  }
}
