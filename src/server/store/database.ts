/**
 * Opening the durable store's database (sqlite_store.ts): its settings (WAL, exclusive lock,
 * checkpoints, incremental vacuum), the format upgrade, and what the store starts from. Also the
 * store's options and counters, and how SQLite errors are told apart and described.
 */
import { Database } from "bun:sqlite";
import { mkdirSync } from "node:fs";
import { KittenError } from "../../protocol/errors.ts";
import { STORE_VERSION } from "../../version.ts";
import type { Logger } from "../log.ts";
import { migrate, setMeta, SQL } from "./record.ts";
import type { DurableMode } from "./store.ts";

export interface SqliteStoreOptions {
  /** The data directory; created when missing. */
  directory: string;
  /** `"fsync"` (default): confirm after the commit is on disk. `"batch"`: confirm at once. */
  mode?: DurableMode;
  /** Batch mode: commit period. Fsync mode: how long removes alone may wait. Default 5 ms. */
  commitIntervalMs?: number;
  /** After a failed commit, how soon pending work is tried again. Default 100 ms. */
  retryIntervalMs?: number;
  logger?: Logger;
  /** Delivery counts wait this long before they are written (DELIVERY_COUNT_DELAY_MS). Default 0: the next commit. */
  deliveryCountDelayMs?: number;
  /**
   * Test hook: runs in every commit just before it is made durable (before a transaction's COMMIT,
   * inside it, or before the journal's frame is written); throwing fails that commit.
   */
  beforeCommit?: () => void;
  /**
   * Journal the appends (default true, journal.ts): a message acked soon after it was confirmed
   * never costs a database row. False: every commit writes the database (the tests of its
   * transactions, which then count rows and commits exactly).
   */
  journal?: boolean;
  /** Told each successful commit's duration (ms, fsync included): the commit-time histogram. */
  onCommit?: (elapsedMs: number) => void;
  /** Free bytes of the data directory's file system (default: statfs); tests give their own. */
  readFree?: (directory: string) => number;
  /** How long an idle store's vacuum steps may take in one `reclaim()` (default IDLE_STEPS_MS, space.ts). */
  idleStepsMs?: number;
  /** Pages given back after which a truncating checkpoint cuts them off the file (default CUT_PAGES, space.ts). */
  cutPages?: number;
  /**
   * Keep the index of messages by id (default true): only a broker with cluster peers or etcd
   * asks by id (`holds`), and without the index each message costs 0.3–1.5 µs less to store and
   * delete (more the more rows are held). A store opened without it builds it when first asked.
   */
  indexById?: boolean;
}

/** Counters for statistics, the probe script and tests. */
export interface SqliteStoreStats {
  /** Transactions committed (each one fsync of the WAL in fsync and batch mode). */
  commits: number;
  /** Transactions that failed and were rolled back. */
  failedCommits: number;
  /** Rows inserted and deleted by committed transactions. */
  inserted: number;
  deleted: number;
  /** Delivery-count and delay UPDATEs run by committed transactions (those written by an INSERT,
   * or dropped because the message was removed first, are not counted). */
  updates: number;
  /** Appends written to the journal, its frames written and fsynced, and settles (journal.ts). */
  journaled: number;
  journalWrites: number;
  journalSyncs: number;
  settles: number;
  /** Appends cancelled by a remove before they reached the disk. */
  cancelled: number;
  /** Appends refused or rejected because the store could not write. */
  refused: number;
  /** Most operations in one transaction. */
  largestBatch: number;
  /** Duration of the last and of the slowest commit, including the fsync (ms). */
  lastCommitMs: number;
  maxCommitMs: number;
  /** Time spent committing, in total (ms). */
  commitMs: number;
  /** Giving disk space back (space.ts): vacuum steps and truncating checkpoints run, pages handed
   * back to the file system, and the slowest step (ms). */
  reclaimSteps: number;
  reclaimedPages: number;
  maxReclaimMs: number;
}

export function newStats(): SqliteStoreStats {
  return {
    commits: 0,
    failedCommits: 0,
    inserted: 0,
    deleted: 0,
    updates: 0,
    journaled: 0,
    journalWrites: 0,
    journalSyncs: 0,
    settles: 0,
    cancelled: 0,
    refused: 0,
    largestBatch: 0,
    lastCommitMs: 0,
    maxCommitMs: 0,
    commitMs: 0,
    reclaimSteps: 0,
    reclaimedPages: 0,
    maxReclaimMs: 0,
  };
}

/**
 * Whether a commit is fsynced. A commit holding appends is (`synchronous=FULL`); one holding only
 * removes, delivery counts and meta values is not (`NORMAL`): nobody waits for it, and a kill -9
 * loses nothing written (the OS has it). Power lost before the next fsync may bring acked
 * messages back (at least once) and lower a delivery count by one commit's worth; in WAL mode the
 * next fsync, of an append's commit or of a checkpoint, covers every commit before it. A drained
 * backlog would otherwise pay one fsync per few milliseconds of acks, about half of the drain's time.
 */
export class CommitSync {
  /** `synchronous=FULL` is in effect (openDatabase sets it). */
  #full = true;

  constructor(readonly db: Database) {}

  set(full: boolean): void {
    if (full === this.#full) return;
    this.db.run(full ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL");
    this.#full = full;
  }
}

/** Counts a committed transaction that took `elapsed` ms. */
export function countCommit(stats: SqliteStoreStats, elapsed: number, rows: { inserted: number; deleted: number; updates: number; operations: number }): void {
  stats.commits++;
  stats.inserted += rows.inserted;
  stats.deleted += rows.deleted;
  stats.updates += rows.updates;
  stats.lastCommitMs = elapsed;
  stats.commitMs += elapsed;
  if (elapsed > stats.maxCommitMs) stats.maxCommitMs = elapsed;
  if (rows.operations > stats.largestBatch) stats.largestBatch = rows.operations;
}

/** The counters a closing store logs, as `key=value` pairs. */
export function describeStats(stats: SqliteStoreStats): string {
  const { commits, inserted, deleted, updates, journaled, journalSyncs, settles, cancelled, maxCommitMs, reclaimSteps, reclaimedPages, maxReclaimMs } = stats;
  return `commits=${commits};inserted=${inserted};deleted=${deleted};updates=${updates};` +
    `journaled=${journaled};journalSyncs=${journalSyncs};settles=${settles};cancelled=${cancelled};` +
    `maxCommitMs=${maxCommitMs.toFixed(1)};reclaimSteps=${reclaimSteps};reclaimedPages=${reclaimedPages};maxReclaimMs=${maxReclaimMs.toFixed(1)}`;
}

/** WAL pages (4 KiB) between automatic checkpoints: 1 MiB. */
export const WAL_CHECKPOINT_PAGES = 256;
/** The WAL file is cut back to this size (bytes) when a checkpoint resets it. */
export const WAL_SIZE_LIMIT = 1024 * 1024;

/** What the store starts from. */
export interface OpenedDatabase {
  db: Database;
  /** False when the disk was full at open: messages are served, sends refused until a write succeeds. */
  healthy: boolean;
  lastError: string;
  /** The index by id exists (its creation fails on a full disk: lookups then answer false). */
  indexedById: boolean;
  /** The next row's position. */
  nextSeq: number;
}

/**
 * Opens (creating when missing) and upgrades the store in `directory`. A disk already full does
 * not stop it: the store then starts unhealthy. Any other failure is a STORE_UNAVAILABLE error.
 */
export function openDatabase(directory: string, path: string, log: Logger, indexById: boolean): OpenedDatabase {
  let healthy = true;
  let lastError = "";
  let indexedById = false;
  let db: Database | undefined;
  let nextSeq = 1;
  try {
    mkdirSync(directory, { recursive: true });
    db = new Database(path, { create: true, readwrite: true });
    // Exclusive before WAL: the wal-index lives in heap memory and the file lock is held.
    db.run("PRAGMA locking_mode = EXCLUSIVE");
    // Before WAL mode writes the header of a new file, the only time this takes effect by itself
    // (an existing file is switched by enableIncrementalVacuum). Not asked again of a file in that
    // mode already: setting it writes, which a full disk refuses.
    if (autoVacuum(db) !== AUTO_VACUUM_INCREMENTAL) db.run("PRAGMA auto_vacuum = INCREMENTAL");
    const journal = db.query<{ journal_mode: string }, []>("PRAGMA journal_mode = WAL").get();
    if (journal?.journal_mode !== "wal") throw new Error(`WAL mode refused (journal_mode=${journal?.journal_mode})`);
    db.run("PRAGMA synchronous = FULL");
    // The WAL is copied into the database every WAL_CHECKPOINT_PAGES pages and cut back to
    // WAL_SIZE_LIMIT after it: on a small or nearly full disk, a WAL left to grow would hold
    // the space that new messages (and the deletes of acks) need.
    db.run(`PRAGMA wal_autocheckpoint = ${WAL_CHECKPOINT_PAGES}`);
    db.run(`PRAGMA journal_size_limit = ${WAL_SIZE_LIMIT}`);
    const found = migrate(db, { directory });
    if (found !== 0 && found < STORE_VERSION) {
      log.info("store", `directory=${directory};from=${found};to=${STORE_VERSION};store upgraded`);
    }
    enableIncrementalVacuum(db, directory, log);
    // A write on every open takes the exclusive lock now, not at the first message. On a full
    // disk it fails, and the store opens anyway: its messages are delivered and acked, and new
    // sends are refused until a commit succeeds again.
    try {
      // Dropped when not wanted, so that a broker that left a cluster stops paying for it.
      db.run(indexById ? SQL.indexById : SQL.dropIndexById);
      indexedById = indexById;
      setMeta(db, "opened", Date.now());
    } catch (error) {
      if (!isDiskFull(error)) throw error;
      healthy = false;
      lastError = describe(error);
      log.error("store", `directory=${directory};disk full at open: messages are served, sends refused until space returns`);
    }
    nextSeq = db.query<{ seq: number }, []>(SQL.maxSeq).get()!.seq + 1;
  } catch (error) {
    try {
      db?.close();
    } catch {
      // Already failing: the first error is the one to report.
    }
    if (error instanceof KittenError) throw error;
    const busy = (error as { code?: unknown }).code === "SQLITE_BUSY" ? "another process (a broker?) has it open: " : "";
    throw new KittenError("STORE_UNAVAILABLE", `Cannot open the store in "${directory}": ${busy}${describe(error)}`, undefined, {
      cause: error,
    });
  }
  return { db: db!, healthy, lastError, indexedById, nextSeq };
}

/**
 * Store format v4 gives disk space back with incremental vacuum (space.ts), which needs the
 * pointer-map pages of `auto_vacuum = INCREMENTAL`. A new file has them from its creation; a file
 * written before v4 gets them from one VACUUM, which rewrites it whole (it needs room for a copy:
 * on a disk that has none, the store runs as before, without giving space back, and tries again
 * at the next start). True when the file is in incremental mode.
 */
export function enableIncrementalVacuum(db: Database, directory: string, log: Logger): boolean {
  if (autoVacuum(db) === AUTO_VACUUM_INCREMENTAL) return true;
  const started = performance.now();
  try {
    db.run("VACUUM"); // with auto_vacuum = INCREMENTAL set at open: rebuilt in that mode
  } catch (error) {
    // The switch is an improvement, not a condition of opening: the store runs as before.
    const why = isDiskFull(error) ? "no room to switch to incremental vacuum" : `cannot switch to incremental vacuum (${describe(error)})`;
    log.warn("store", `directory=${directory};${why}: disk space is not given back until a start that can`);
    return false;
  }
  truncateWal(db); // the VACUUM went through the WAL: the whole file is in it
  const elapsed = (performance.now() - started).toFixed(0);
  log.info("store", `directory=${directory};elapsedMs=${elapsed};switched to incremental vacuum (one VACUUM)`);
  return autoVacuum(db) === AUTO_VACUUM_INCREMENTAL;
}

/** `PRAGMA auto_vacuum`'s value for INCREMENTAL. */
export const AUTO_VACUUM_INCREMENTAL = 2;

/** The file's auto_vacuum mode: 0 none, 1 full, 2 incremental. */
export function autoVacuum(db: Database): number | undefined {
  return db.query<{ auto_vacuum: number }, []>("PRAGMA auto_vacuum").get()?.auto_vacuum;
}

/**
 * Copies the WAL into the database and truncates it, which gives back the space of every
 * superseded page version once the disk has room for the copy. True when it did.
 */
export function truncateWal(db: Database): boolean {
  try {
    const result = db.query<{ busy: number; log: number; checkpointed: number }, []>("PRAGMA wal_checkpoint(TRUNCATE)").get();
    return result?.busy === 0;
  } catch {
    return false; // still no room for the copy: the next failed commit tries again
  }
}

/** SQLITE_FULL: the disk (or the quota) has no room for the write. */
export function isDiskFull(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  return typeof code === "string" && (code.startsWith("SQLITE_FULL") || code === "ENOSPC");
}

/** `SQLITE_FULL: database or disk is full` from a SQLiteError, the message of anything else. */
export function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === "string" && !error.message.startsWith(code) ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}
