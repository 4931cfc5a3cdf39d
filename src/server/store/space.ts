/**
 * The durable store's disk space (sqlite_store.ts owns the connection and the commits): what
 * drained queues no longer need goes back to the file system while the broker runs, and a disk
 * that filled up takes sends again once space is freed, without a restart.
 *
 * Giving space back. The database is in `auto_vacuum = INCREMENTAL` (store format v4): the pages
 * that deleted rows leave go to SQLite's freelist, where later rows reuse them, but the file never
 * shrinks by itself. `reclaim()`, called by the broker's tick (every 25 ms), reads the freelist's
 * length (the header page: a few µs) and, while it holds RECLAIM_MIN_PAGES and a quarter of the
 * file, runs one `PRAGMA incremental_vacuum(n)`: the last pages in use move into free ones and the
 * end is cut off. That is a commit of its own (not fsynced, like the commits of acks), and the
 * group commit waits for it, so `n` adapts to keep a step near STEP_TARGET_MS. While the store
 * writes more than BUSY_ROWS_PER_SECOND (a drain in progress: the pages at the end of the file,
 * which a step would move, are the next it frees anyway) one step runs every BUSY_STEP_MS at
 * most, and only for BUSY_RECLAIM_MIN_PAGES free pages or more (fewer are reused by the next
 * rows at once). An idle store goes on with more steps, one per turn of the event loop, until
 * they took `idleStepsMs` since the tick (20 ms): a drained backlog of 20,000,000 messages leaves
 * 3.6 GiB of free pages, of which one step per tick would give back about 10 MiB/s. The file
 * shrinks at the next checkpoint; once the freelist is short again, one
 * `wal_checkpoint(TRUNCATE)` cuts both the file and the WAL. The same checkpoint
 * runs when the WAL grew past WAL_SIZE_LIMIT (a large transaction) and the store went quiet
 * before a commit cut it back. A step that includes a checkpoint (SQLite's own, every WAL_CHECKPOINT_PAGES of WAL) takes
 * longer: its fsync, as for a commit that checkpoints (scenario (g): 14–22 ms on the 2-core box).
 *
 * A full disk. A commit that meets a full disk may leave the WAL holding pages beyond the end of
 * the database file: a checkpoint must grow the file to copy them, and until one completes nothing
 * can be committed, not even the deletes of acks that would free space. A store that filled its
 * own disk would stay full after its consumers drained it. So the store keeps RESERVE_BYTES in a
 * file of its own, `kitten-mq.reserve`, written when the disk has room for it and RESERVE_MARGIN
 * more. The first commit that meets a full disk empties it (the empty file stays, so that a
 * restart knows), and the checkpoint that this allows lets the acks' deletes through. Until the
 * reserve is written again, new messages are refused (`short`): the room it gave serves acks and
 * the vacuum, which hand the drained space back; as soon as the disk has room for the reserve
 * again (the vacuum's doing, or an operator's), it is rewritten and sends are taken again.
 * A disk that never had room for a reserve (a few MiB) works as without one.
 */
import { randomBytes } from "node:crypto";
import type { Database, Statement } from "bun:sqlite";
import { rmSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { KittenError } from "../../protocol/errors.ts";
import type { Logger } from "../log.ts";
import { AUTO_VACUUM_INCREMENTAL, autoVacuum, describe, isDiskFull, type SqliteStoreStats, truncateWal, WAL_SIZE_LIMIT } from "./database.ts";
import { freeBytes } from "./disk_floor.ts";
import { STORE_FILE } from "./record.ts";

/** The reserve file in the data directory. */
export const RESERVE_FILE = "kitten-mq.reserve";
/** Room kept for a full disk: twice what the WAL is cut back to, which bounds the pages a checkpoint must add. */
export const RESERVE_BYTES = 2 * WAL_SIZE_LIMIT;
/** Free space beyond the reserve that the disk must have before it is written (so that writing it never fills the disk). */
const RESERVE_MARGIN = WAL_SIZE_LIMIT;
/** Fewer free pages than this are not worth a vacuum step (256 KiB). */
const RECLAIM_MIN_PAGES = 64;
/** About how long one vacuum step may block the event loop (ms). */
const STEP_TARGET_MS = 4;
/** Fewer free pages than this are left alone while the store is busy (16 MiB): they are reused at once. */
const BUSY_RECLAIM_MIN_PAGES = 4096;
/** Rows inserted and deleted per second above which the store is busy (a drain, a burst). */
const BUSY_ROWS_PER_SECOND = 1000;
/** While the store is busy, the time between two vacuum steps (ms): about 2% of the event loop. */
const BUSY_STEP_MS = 250;
const MIN_STEP_PAGES = 16;
/**
 * An idle store's steps in one tick take about this long in all (ms): about 40% of the event loop
 * while it gives back, each step on its own turn (a send waits for one). With 10 ms, (g) gave its
 * 3.6 GiB back in 55 s on one run and not within 60 s on another (the machine's speed varies).
 */
export const IDLE_STEPS_MS = 20;
const MAX_STEP_PAGES = 16_384;
/** Pages given back (32 MiB) after which a truncating checkpoint cuts them off the file, as a step of its own. */
export const CUT_PAGES = 8192;
/** Why new messages are refused while the reserve is in use. */
const SHORT_REASON = `the disk is full: new messages are refused until ${RESERVE_BYTES + RESERVE_MARGIN} bytes are free ` +
  `(the store's reserve, ${RESERVE_FILE}, is in use)`;
/** How often, while the reserve is in use, the free space is read to write it again. */
const RESERVE_CHECK_MS = 100;
/** How often a store whose disk never had room for the reserve tries to write it. */
const RESERVE_RETRY_MS = 1000;
/** How often the WAL's size is looked at. */
const WAL_CHECK_MS = 1000;
/** After a step that failed (a full disk, a scan holding the WAL), the next one waits this long. */
const RETRY_MS = 1000;
/** After a commit that met a full disk, how soon the WAL may be checkpointed again for it. */
const FULL_CHECKPOINT_MS = 1000;

interface StoreSpaceOptions {
  directory: string;
  log: Logger;
  /** The store's counters: the reclaim figures are kept there. */
  stats: SqliteStoreStats;
  /** Runs before each vacuum step: the store turns the fsync of commits off (nobody waits for them). */
  beforeWrite: () => void;
  /** Free bytes of the directory's file system (disk_floor.ts's statfs; a test gives its own). */
  readFree?: (directory: string) => number;
  /** How long an idle store's steps may take in one tick, back to back (ms; IDLE_STEPS_MS). */
  idleStepsMs?: number;
  /** Pages given back after which a truncating checkpoint cuts them off (CUT_PAGES). */
  cutPages?: number;
}

export class StoreSpace {
  readonly #db: Database;
  readonly #directory: string;
  readonly #log: Logger;
  readonly #stats: SqliteStoreStats;
  readonly #beforeWrite: () => void;
  readonly #readFree: (directory: string) => number;
  readonly #idleStepsMs: number;
  readonly #cutPages: number;
  readonly #freelist: Statement<{ freelist_count: number }, []>;
  readonly #pageCount: Statement<{ page_count: number }, []>;
  readonly #reservePath: string;
  readonly #walPath: string;
  /** The file is in incremental vacuum (a store that could not switch yet only checkpoints). */
  readonly #vacuumable: boolean;
  /** `"held"`: the reserve is on disk; `"used"`: emptied by a full disk; `"none"`: the disk never had room for it. */
  #reserve: "held" | "used" | "none";
  #stepPages = 256;
  /** An idle store's next step waits for its turn (#moreSteps). */
  #stepping = false;
  /** Closed: its statements are finalized, a step waiting for its turn does not run. */
  #finalized = false;
  /**
   * Pages given back since this store's last truncating checkpoint (SQLite's own may have cut
   * some already): the file shrinks only at one, so more than 0 asks for one.
   */
  #uncut = 0;
  /** The freelist's length when last read (null: not yet). */
  #free: number | null = null;
  #reserveCheckedAt = -Infinity;
  #walCheckedAt = -Infinity;
  #failedAt = -Infinity;
  #fullCheckpointAt = -Infinity;
  #steppedAt = -Infinity;
  /** Rows the store had written (inserted and deleted) at the last call, and when. */
  #rowsSeen = 0;
  #calledAt = -Infinity;

  constructor(db: Database, options: StoreSpaceOptions) {
    this.#db = db;
    this.#directory = options.directory;
    this.#log = options.log;
    this.#stats = options.stats;
    this.#beforeWrite = options.beforeWrite;
    this.#readFree = options.readFree ?? freeBytes;
    this.#idleStepsMs = options.idleStepsMs ?? IDLE_STEPS_MS;
    this.#cutPages = options.cutPages ?? CUT_PAGES;
    this.#freelist = db.prepare("PRAGMA freelist_count");
    this.#pageCount = db.prepare("PRAGMA page_count");
    this.#reservePath = join(this.#directory, RESERVE_FILE);
    this.#walPath = join(this.#directory, `${STORE_FILE}-wal`);
    this.#vacuumable = autoVacuum(db) === AUTO_VACUUM_INCREMENTAL;
    const size = statSync(this.#reservePath, { throwIfNoEntry: false })?.size;
    if (size === RESERVE_BYTES) this.#reserve = "held";
    else if (size === 0) this.#reserve = this.#write("empty") ? "held" : "used"; // emptied before this start
    else this.#reserve = this.#write("remove") ? "held" : "none";
    if (this.#reserve === "used") {
      this.#log.warn("store", `directory=${this.#directory};the reserve is still in use: sends refused until ${RESERVE_BYTES + RESERVE_MARGIN} bytes are free`);
    }
  }

  /**
   * True while the reserve is in use and the disk still has no room to write it again (looked at
   * every RESERVE_CHECK_MS, by a send or the tick): new messages are refused, so that the room it
   * gave serves acks. The first send after space came back writes it and is taken.
   */
  get short(): boolean {
    if (this.#reserve !== "used") return false;
    this.#keepReserve(performance.now());
    return this.#reserve === "used";
  }

  /** While `short`, the refusal of a new message (`what` says what cannot be done); else null. */
  refusal(what: string): KittenError | null {
    return this.short ? new KittenError("STORE_UNAVAILABLE", `${what}: ${SHORT_REASON}`) : null;
  }

  /**
   * One bounded step of giving space back; called often (the broker's tick), between commits.
   * Does nothing (two reads of the header page) when there is nothing to give back.
   */
  reclaim(): void {
    const now = performance.now();
    this.#keepReserve(now);
    const short = this.short;
    const rows = this.#stats.inserted + this.#stats.deleted;
    const busy = (rows - this.#rowsSeen) * 1000 > BUSY_ROWS_PER_SECOND * (now - this.#calledAt);
    const moved = rows !== this.#rowsSeen;
    this.#rowsSeen = rows;
    this.#calledAt = now;
    if (now - this.#failedAt < RETRY_MS || (busy && !short && now - this.#steppedAt < BUSY_STEP_MS)) return;
    try {
      // The freelist changes only with rows written or vacuum steps: an idle store reads nothing.
      const known = !moved && !short && this.#uncut === 0 ? this.#free : null;
      const free = !this.#vacuumable ? 0 : known ?? this.#freelist.get()!.freelist_count;
      this.#free = free;
      if (free > 0 && (short || this.#worth(free, busy))) {
        this.#free = null; // read again after the step
        const left = this.#step(free, now);
        if (!busy && !short) this.#moreSteps(left, performance.now() - now);
      } else if (this.#uncut > 0 || (!busy && this.#walGrew(now))) {
        // A WAL over its limit waits for a quiet store: until then every commit's checkpoint cuts it back.
        if (!truncateWal(this.#db)) throw new Error("checkpoint busy or failed");
        this.#uncut = 0;
        this.#count(now);
      }
    } catch (error) {
      this.#stepFailed(error);
    }
  }

  /**
   * A full disk or a scan in progress (its snapshot holds the WAL): tried again after RETRY_MS,
   * and after a full disk with the smallest step (it must fit in the room the reserve gave).
   */
  #stepFailed(error: unknown): void {
    this.#failedAt = performance.now();
    if (isDiskFull(error)) this.#stepPages = MIN_STEP_PAGES;
    this.#log.debug("store", `directory=${this.#directory};space not given back yet: ${describe(error)}`);
  }

  /**
   * A commit met a full disk. The first time, the reserve is emptied; then (at most once a second)
   * the WAL is checkpointed and truncated, which gives back what its old frames hold once the
   * database file has room for their pages.
   */
  diskFull(): void {
    if (this.#reserve === "held") {
      try {
        truncateSync(this.#reservePath, 0);
        this.#reserve = "used";
        this.#log.error("store", `directory=${this.#directory};disk full: reserve of ${RESERVE_BYTES} bytes released for acks; ${SHORT_REASON}`);
      } catch (error) {
        this.#log.error("store", `directory=${this.#directory};disk full: cannot release the reserve: ${describe(error)}`);
      }
      this.#fullCheckpointAt = -Infinity;
    }
    const now = performance.now();
    if (now - this.#fullCheckpointAt < FULL_CHECKPOINT_MS) return;
    this.#fullCheckpointAt = now;
    if (truncateWal(this.#db)) this.#log.info("store", `directory=${this.#directory};disk full: WAL checkpointed and truncated`);
  }

  finalize(): void {
    this.#finalized = true;
    this.#freelist.finalize();
    this.#pageCount.finalize();
  }

  /**
   * An idle store goes on with steps until they took `idleStepsMs` since the tick, each on its own
   * turn of the event loop: a send that arrives meanwhile waits for one step, not for all of them.
   * The next tick starts over (and stops when rows stream in again: `busy`).
   */
  #moreSteps(free: number, spentMs: number): void {
    if (spentMs >= this.#idleStepsMs || this.#stepping || !this.#worth(free, false)) return;
    this.#stepping = true;
    setImmediate(() => {
      this.#stepping = false;
      if (this.#finalized) return;
      const started = performance.now();
      try {
        const left = this.#step(free, started);
        this.#free = null;
        this.#moreSteps(left, spentMs + performance.now() - started);
      } catch (error) {
        this.#stepFailed(error);
      }
    });
  }

  /**
   * True when `free` pages are worth a step. While rows stream in and out, free pages are reused
   * at once: a small file is left alone (a steady work queue would pay a vacuum step and a
   * truncating checkpoint, with their fsyncs, every BUSY_STEP_MS for nothing), a drained
   * backlog's space goes back meanwhile.
   */
  #worth(free: number, busy: boolean): boolean {
    return free >= (busy ? BUSY_RECLAIM_MIN_PAGES : RECLAIM_MIN_PAGES) && free * 4 >= this.#pageCount.get()!.page_count;
  }

  /**
   * One vacuum step, or, once CUT_PAGES were given back since the last one, a truncating
   * checkpoint (the file shrinks only at a checkpoint, by one ftruncate whose time grows with
   * what it cuts: SQLite's own checkpoints, every WAL_CHECKPOINT_PAGES of WAL, came after
   * hundreds of MiB of steps and took up to 131 ms). Returns the free pages left.
   */
  #step(free: number, started: number): number {
    if (this.#uncut < this.#cutPages) return this.#vacuum(free, started);
    this.#beforeWrite();
    if (!truncateWal(this.#db)) throw new Error("checkpoint busy or failed");
    this.#uncut = 0;
    this.#count(started);
    return free;
  }

  /** One vacuum step; returns the free pages left. */
  #vacuum(free: number, started: number): number {
    this.#beforeWrite();
    this.#db.run(`PRAGMA incremental_vacuum(${this.#stepPages})`);
    const elapsed = performance.now() - started;
    // Fewer pages when a step took too long, more while steps are quick.
    if (elapsed > STEP_TARGET_MS) this.#stepPages = Math.max(MIN_STEP_PAGES, this.#stepPages >> 1);
    else if (elapsed < STEP_TARGET_MS / 2) this.#stepPages = Math.min(MAX_STEP_PAGES, this.#stepPages * 2);
    const left = this.#freelist.get()!.freelist_count;
    this.#stats.reclaimedPages += free - left;
    this.#uncut += free - left;
    this.#count(started);
    return left;
  }

  #count(started: number): void {
    const elapsed = performance.now() - started;
    this.#steppedAt = started;
    this.#stats.reclaimSteps++;
    if (elapsed > this.#stats.maxReclaimMs) this.#stats.maxReclaimMs = elapsed;
  }

  /** The WAL is bigger than WAL_SIZE_LIMIT (looked at once a second). */
  #walGrew(now: number): boolean {
    if (now - this.#walCheckedAt < WAL_CHECK_MS) return false;
    this.#walCheckedAt = now;
    return (statSync(this.#walPath, { throwIfNoEntry: false })?.size ?? 0) > WAL_SIZE_LIMIT;
  }

  /**
   * Writes the reserve again once the disk has room: after a full disk emptied it (every
   * RESERVE_CHECK_MS), or when the disk never had room for it (every RESERVE_RETRY_MS).
   */
  #keepReserve(now: number): void {
    if (this.#reserve === "held") return;
    const every = this.#reserve === "used" ? RESERVE_CHECK_MS : RESERVE_RETRY_MS;
    if (now - this.#reserveCheckedAt < every) return;
    this.#reserveCheckedAt = now;
    if (!this.#write(this.#reserve === "used" ? "empty" : "remove")) return;
    if (this.#reserve === "used") {
      this.#log.info("store", `directory=${this.#directory};disk has room again: reserve restored, sends accepted`);
    }
    this.#reserve = "held";
  }

  /**
   * Writes the reserve when the disk has room for it and RESERVE_MARGIN more; true when it did.
   * Random bytes: a file system that compresses must not store it in less. A write that fails
   * leaves the file empty (a reserve in use) or removes it (none yet).
   */
  #write(onFailure: "empty" | "remove"): boolean {
    let free: number;
    try {
      free = this.#readFree(this.#directory) + (statSync(this.#reservePath, { throwIfNoEntry: false })?.size ?? 0);
    } catch {
      return false;
    }
    if (free < RESERVE_BYTES + RESERVE_MARGIN) return false;
    try {
      writeFileSync(this.#reservePath, randomBytes(RESERVE_BYTES));
      return true;
    } catch (error) {
      this.#log.warn("store", `directory=${this.#directory};cannot write the reserve: ${describe(error)}`);
      try {
        if (onFailure === "empty") truncateSync(this.#reservePath, 0);
        else rmSync(this.#reservePath, { force: true });
      } catch {
        // Left as it is: the next start rewrites or empties it.
      }
      return false;
    }
  }
}
