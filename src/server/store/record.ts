/**
 * The on-disk format of the durable store: the SQLite schema, the row of one message, the meta
 * values, and the upgrade path between store versions.
 *
 * Format v7 (`STORE_VERSION = 7`): the journal's files (journal.ts) and one SQLite database
 * `kitten-mq.db` in WAL mode and `auto_vacuum = INCREMENTAL` (v4: the pages rows leave free are
 * handed back to the file system by space.ts), next to `kitten-mq.reserve` (space.ts: room kept
 * for a full disk, or an empty file while that room is in use):
 *
 *   meta(key TEXT PRIMARY KEY, value)      store_version (integer), epoch (integer, cluster
 *                                          fencing, 0 until a cluster sets it), created (ms),
 *                                          journal_through (v6: the last position a settle of
 *                                          the journal moved into the database)
 *   messages(seq INTEGER PRIMARY KEY,      arrival order (the store assigns it; load() sorts by it)
 *            id TEXT, queue TEXT,          StoredMessage fields, one row per accepted message;
 *            destination TEXT,             the row is deleted when every copy is settled
 *            created INTEGER, body BLOB,
 *            deliveries INTEGER            highest delivery count of its copies (v2; 0 by default,
 *                NOT NULL DEFAULT 0,       raised by an UPDATE in a later commit, never lowered)
 *            dead_letter TEXT,             v2: null, or the JSON of `StoredDeadLetter`
 *                                          {"reason","channel","messageId","deliveries"} for a
 *                                          message a dead-letter queue received
 *            not_before INTEGER            v5: when a delayed requeue (a nack with a delay) of
 *                NOT NULL DEFAULT 0)       the message is due, ms since epoch; 0 when none was
 *                                          noted (set by an UPDATE in a later commit, or by the
 *                                          INSERT of a message that came delayed with a move)
 *   messages_by_queue ON messages(queue, seq)   v3: a queue's messages in arrival order, so a
 *                                          queue paged to disk reads its next rows without
 *                                          scanning the other queues' rows
 *   queue_usage(queue TEXT PRIMARY KEY,    v3: rows and estimated bytes (`rowBytes`) per queue,
 *               messages, bytes)           changed by each commit in the same transaction as the
 *                                          rows: a restart knows every queue's depth without
 *                                          counting (a count of 20 M rows takes seconds)
 *
 * Format v7 is v6 with recycled journal files: every frame carries its file's generation
 * (journal_frames.ts), so that a file can be written over instead of truncated. A v6 broker would
 * replay what an earlier turn left past a v7 file's end: it must not open the store.
 * Format v6 was v7 with journal files truncated at each turn, and no generation in the frames
 * (`UPGRADES[6]` only records the version: v6 frames read as generation 0). v6 is v5 with the
 * journal (journal.ts: the files `journal-a` and `journal-b` beside the database, and the meta
 * value `journal_through`): the tables are unchanged, but a store with messages in its journal
 * must not be opened by a version that would not read them.
 * Format v5 was v6 without the journal (`UPGRADES[5]` only records the version).
 * Format v4 was v5 without `not_before` (`UPGRADES[4]` adds the column: existing rows get 0).
 * Format v3 was v4 without auto_vacuum (and without the reserve): the same tables and rows.
 * `UPGRADES[3]` only records the version; the switch itself is one VACUUM, which cannot run
 * inside migrate's transaction, so `enableIncrementalVacuum` (database.ts) runs it right after, at
 * every open until it is done (it needs room for a copy of the file).
 * Format v2 was v3 without `messages_by_queue` and `queue_usage` (`UPGRADES[2]` creates them and
 * counts the rows once).
 * Format v1 was v2 without `deliveries` and `dead_letter` (columns added at the end by
 * `UPGRADES[1]`, so both shapes have the same column order); its messages load with deliveries 0
 * and no dead letter.
 *
 * How to change the format (beanstalkd's `Walver`):
 * 1. Bump `STORE_VERSION` in src/version.ts and add an "Upgrading" entry in CHANGELOG.md.
 * 2. Change `SCHEMA` and `SQL` to the new shape (a fresh store is created directly at the newest
 *    version), change `encodeRecord`, write `decodeRecordVn` and point `decodeRecord` at it.
 * 3. Keep `decodeRecordV1` (and every older decoder): an upgrade step may need to read old rows.
 * 4. Add `UPGRADES[n]`, the step from version n to n + 1. `migrate` runs the steps one after
 *    another inside one transaction together with the new `store_version`, so a crash during an
 *    upgrade leaves the old version intact. Prefer SQL (`ALTER TABLE … ADD COLUMN … DEFAULT …`);
 *    when a row must be rewritten, read it with the old decoder and write it with the new encoder.
 * 5. Keep the fixture tests of every older version (tests/server/store/fixtures/store_v1.sql,
 *    store_v2.sql, …) and add one for the new version: every release must read every older format.
 * A store written by a newer version is refused (never downgraded): `migrate` throws.
 */
import type { Database, Statement } from "bun:sqlite";
import { KittenError } from "../../protocol/errors.ts";
import { STORE_VERSION } from "../../version.ts";
import type { StoredDeadLetter, StoredMessage } from "./store.ts";

/** The database file inside the data directory (with its `-wal` companion). */
export const STORE_FILE = "kitten-mq.db";

/** Meta keys. */
export const META = {
  STORE_VERSION: "store_version",
  /** Cluster fencing epoch: a primary writes a higher one; a store never goes back. */
  EPOCH: "epoch",
  /** When the store was created (ms since epoch). */
  CREATED: "created",
} as const;

export type MetaValue = string | number;

/** The schema of the current version; a fresh store starts here. */
/**
 * Bytes a row costs on disk beyond its body and id, estimated: the other columns, the record
 * header, its index entry and page slack. The usage figures are for operators (which queue fills
 * the disk), not an exact accounting of SQLite's pages.
 */
export const ROW_OVERHEAD_BYTES = 64;

/** Estimated bytes of one row on disk (see ROW_OVERHEAD_BYTES). */
export function rowBytes(message: { body: Uint8Array; id: string; destination: string }): number {
  return message.body.length + message.id.length + message.destination.length + ROW_OVERHEAD_BYTES;
}

/**
 * The v3 additions: the per-queue index and the usage table. The store adds each commit's
 * per-queue totals to `queue_usage` inside that commit (one statement per queue per commit: a
 * trigger per row cost about 0.9 µs a row, a third of the row itself).
 */
const USAGE_SCHEMA = [
  "CREATE INDEX messages_by_queue ON messages (queue, seq)",
  "CREATE TABLE queue_usage (queue TEXT PRIMARY KEY, messages INTEGER NOT NULL, bytes INTEGER NOT NULL) WITHOUT ROWID",
];

export const SCHEMA = [
  "CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
  `CREATE TABLE messages (
     seq INTEGER PRIMARY KEY,
     id TEXT NOT NULL,
     queue TEXT NOT NULL,
     destination TEXT NOT NULL,
     created INTEGER NOT NULL,
     body BLOB NOT NULL,
     deliveries INTEGER NOT NULL DEFAULT 0,
     dead_letter TEXT,
     not_before INTEGER NOT NULL DEFAULT 0
   )`,
  ...USAGE_SCHEMA,
];

/** Statements on the rows of the current version (parameters in `encodeRecord` order). */
export const SQL = {
  insert:
    "INSERT INTO messages (seq, id, queue, destination, created, body, deliveries, dead_letter, not_before) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
  delete: "DELETE FROM messages WHERE seq = ?",
  /** Parameters: first and last seq of a run of consecutive positions that all go. */
  deleteRun: "DELETE FROM messages WHERE seq BETWEEN ? AND ?",
  /** Parameters: deliveries, seq. A count only grows (copies report theirs in any order). */
  updateDeliveries: "UPDATE messages SET deliveries = max(deliveries, ?) WHERE seq = ?",
  /** Parameters: not_before, seq. The latest delay noted wins (a later nack may be shorter). */
  updateNotBefore: "UPDATE messages SET not_before = ? WHERE seq = ?",
  selectAll: "SELECT seq, id, queue, destination, created, body, deliveries, dead_letter, not_before FROM messages ORDER BY seq",
  /** Parameters: queue, first seq, limit. One page of a queue, in arrival order (`messages_by_queue`), without the queue column. */
  selectQueue:
    "SELECT seq, id, destination, created, body, deliveries, dead_letter, not_before FROM messages WHERE queue = ? AND seq >= ? ORDER BY seq LIMIT ?",
  /** Parameters: queue, first seq. The rows and estimated bytes of a queue from a position on. */
  measureFrom: `SELECT count(*) AS messages, coalesce(sum(length(body) + length(id) + length(destination) + ${ROW_OVERHEAD_BYTES}), 0) AS bytes FROM messages WHERE queue = ? AND seq >= ?`,
  deleteFrom: "DELETE FROM messages WHERE queue = ? AND seq >= ?",
  /** The same for one destination id. Parameters: queue, first seq, destination. */
  measureFromTo: `SELECT count(*) AS messages, coalesce(sum(length(body) + length(id) + length(destination) + ${ROW_OVERHEAD_BYTES}), 0) AS bytes FROM messages WHERE queue = ? AND seq >= ? AND destination = ?`,
  deleteFromTo: "DELETE FROM messages WHERE queue = ? AND seq >= ? AND destination = ?",
  /** Every queue with stored rows: its row count and estimated bytes. */
  usage: "SELECT queue, messages, bytes FROM queue_usage WHERE messages > 0",
  /** Parameters: queue, rows, bytes (both may be negative): one commit's change to a queue's usage. */
  addUsage:
    "INSERT INTO queue_usage (queue, messages, bytes) VALUES (?, ?, ?) ON CONFLICT (queue) DO UPDATE SET messages = messages + excluded.messages, bytes = bytes + excluded.bytes",
  maxSeq: "SELECT coalesce(max(seq), 0) AS seq FROM messages",
  /** Parameter: limit. The ids of the newest rows, newest first (the primary key read backwards). */
  newestIds: "SELECT id FROM messages ORDER BY seq DESC LIMIT ?",
  /** Parameter: queue. The position of its newest committed row (0: none), through messages_by_queue. */
  lastOfQueue: "SELECT coalesce(max(seq), 0) AS seq FROM messages WHERE queue = ?",
  /**
   * Messages by id: a slave asks whether it holds a message its master streams (paged ones are
   * on disk only). Created at open by a broker in a cluster, dropped by one that is not.
   */
  indexById: "CREATE INDEX IF NOT EXISTS messages_by_id ON messages (id)",
  dropIndexById: "DROP INDEX IF EXISTS messages_by_id",
  /** Parameter: message id. */
  holds: "SELECT 1 FROM messages WHERE id = ? LIMIT 1",
  getMeta: "SELECT value FROM meta WHERE key = ?",
  setMeta: "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
} as const;

/** A v1 row as v1's `SELECT seq, id, queue, destination, created, body` returned it (`.values()`). */
export type RecordV1 = [seq: number, id: string, queue: string, destination: string, created: number, body: Uint8Array];

/** A v2 row (v2 to v4) as their `SELECT seq, id, queue, destination, created, body, deliveries, dead_letter` returned it. */
export type RecordV2 = [
  seq: number,
  id: string,
  queue: string,
  destination: string,
  created: number,
  body: Uint8Array,
  deliveries: number,
  deadLetter: string | null,
];

/** A v5 row as `SQL.selectAll` returns it (`.values()`), and as `SQL.insert` binds it. */
export type RecordV5 = [...RecordV2, notBefore: number];

/**
 * Writes the row of a message (current version) with a prepared `SQL.insert`; no array per row.
 * `deliveries` is the count to store (the store passes the highest of the message's own and the
 * ones noted while its append was pending), `notBefore` the due time of its delayed requeue (0: none).
 */
export function encodeRecord(insert: Statement<unknown, RecordV5>, seq: number, message: StoredMessage, deliveries: number, notBefore: number): void {
  insert.run(seq, message.id, message.queue, message.destination, message.created, message.body, deliveries, deadLetterColumn(message), notBefore);
}

/** The `dead_letter` column of a message's row: its dead-letter fields as JSON, or null. */
export function deadLetterColumn(message: StoredMessage): string | null {
  const dead = message.deadLetter;
  return dead ? JSON.stringify({ reason: dead.reason, channel: dead.channel, messageId: dead.messageId, deliveries: dead.deliveries }) : null;
}

/** A v1 row: no delivery count and no dead letter were kept, so 0 and null. */
export function decodeRecordV1(row: RecordV1): StoredMessage {
  const [, id, queue, destination, created, body] = row;
  return { id, queue, destination, created, body, deliveries: 0, deadLetter: null, position: undefined };
}

export function decodeRecordV2(row: RecordV2): StoredMessage {
  const [seq, id, queue, destination, created, body, deliveries, deadLetter] = row;
  const dead = deadLetter === null ? null : decodeDeadLetter(seq, deadLetter);
  return { id, queue, destination, created, body, deliveries, deadLetter: dead, position: undefined };
}

export function decodeRecordV5(row: RecordV5): StoredMessage {
  const message = decodeRecordV2(row as unknown as RecordV2);
  message.notBefore = row[8];
  return message;
}

export function decodeDeadLetter(seq: number, json: string): StoredDeadLetter {
  let value: Partial<StoredDeadLetter> | null;
  try {
    value = JSON.parse(json);
  } catch {
    value = null;
  }
  const { reason, channel, messageId, deliveries } = value ?? {};
  if (
    (reason !== "requeueLimit" && reason !== "overflow" && reason !== "ttl") ||
    typeof channel !== "string" ||
    typeof messageId !== "string" ||
    typeof deliveries !== "number"
  ) {
    throw new Error(`messages row seq=${seq}: invalid dead_letter ${JSON.stringify(json)}`);
  }
  return { reason, channel, messageId, deliveries };
}

/** Decodes a row written by `version` (only the current version's rows exist after `migrate`). */
export function decodeRecord(version: number, row: unknown[]): StoredMessage {
  switch (version) {
    case 1:
      return decodeRecordV1(row as RecordV1);
    case 2:
    case 3: // v3 changed indexes and tables around the rows, not the rows
    case 4: // v4 changed how the file gives pages back, not the rows
      return decodeRecordV2(row as RecordV2);
    case 5:
    case 6: // v6 added the journal, not a column
    case 7: // v7 changed the journal's frames, not the rows
      return decodeRecordV5(row as RecordV5);
    default:
      throw new Error(`no decoder for store version ${version}`);
  }
}

/** `UPGRADES[n]` turns a version n store into version n + 1 (inside migrate's transaction). */
export type Upgrade = (db: Database) => void;
export const UPGRADES: Readonly<Record<number, Upgrade>> = {
  /** v1 → v2: delivery counts and dead-letter info; existing messages get 0 and null. */
  1: (db) => {
    db.run("ALTER TABLE messages ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 0");
    db.run("ALTER TABLE messages ADD COLUMN dead_letter TEXT");
  },
  /** v2 → v3: the per-queue index and usage table; the usage is counted once, here. */
  2: (db) => {
    for (const statement of USAGE_SCHEMA) db.run(statement);
    db.run(
      "INSERT INTO queue_usage (queue, messages, bytes) SELECT queue, count(*), " +
        `sum(length(body) + length(id) + length(destination) + ${ROW_OVERHEAD_BYTES}) FROM messages GROUP BY queue`,
    );
  },
  /** v3 → v4: nothing in the tables; the file is switched to incremental vacuum after migrate (above). */
  3: () => {},
  /** v4 → v5: the due time of a delayed requeue; existing messages have none (0). */
  4: (db) => {
    db.run("ALTER TABLE messages ADD COLUMN not_before INTEGER NOT NULL DEFAULT 0");
  },
  /** v5 → v6: nothing in the tables; the journal's files start empty beside the database. */
  5: () => {},
  /** v6 → v7: nothing in the tables; the journal's v6 frames read as generation 0 (journal_frames.ts). */
  6: () => {},
};

export function getMeta(db: Database, key: string): MetaValue | null {
  const row = db.query<{ value: MetaValue }, [string]>(SQL.getMeta).get(key);
  return row?.value ?? null;
}

export function setMeta(db: Database, key: string, value: MetaValue): void {
  db.query(SQL.setMeta).run(key, value);
}

export interface MigrateOptions {
  /** Named in error messages. */
  directory: string;
  /** The version to reach (tests pass a future one). */
  target?: number;
  upgrades?: Readonly<Record<number, Upgrade>>;
  now?: () => number;
}

/**
 * Brings an open database to the target version: creates the schema in an empty database,
 * upgrades an older one step by step, refuses a newer one or one that is not a Kitten-MQ store.
 * Returns the version found on disk before any upgrade (0 for a new store).
 */
export function migrate(db: Database, options: MigrateOptions): number {
  const { directory, target = STORE_VERSION, upgrades = UPGRADES, now = Date.now } = options;
  const refuse = (why: string) => new KittenError("STORE_UNAVAILABLE", `Cannot open the store in "${directory}": ${why}`);
  let found = 0;
  db.transaction(() => {
    const tables = db.query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'table'").all();
    if (tables.length === 0) {
      for (const statement of SCHEMA) db.run(statement);
      setMeta(db, META.STORE_VERSION, target);
      setMeta(db, META.EPOCH, 0);
      setMeta(db, META.CREATED, now());
      return;
    }
    if (!tables.some((table) => table.name === "meta")) {
      throw refuse(`${STORE_FILE} is not a Kitten-MQ store (no meta table)`);
    }
    const version = getMeta(db, META.STORE_VERSION);
    if (typeof version !== "number" || !Number.isInteger(version) || version < 1) {
      throw refuse(`${STORE_FILE} has no valid store_version (${JSON.stringify(version)})`);
    }
    found = version;
    if (version > target) {
      throw refuse(
        `it was written by store version ${version}, and this Kitten-MQ reads versions up to ${target}. ` +
          "Run a newer Kitten-MQ, or point dataDirectory at another directory",
      );
    }
    for (let from = version; from < target; from++) {
      const upgrade = upgrades[from];
      if (!upgrade) throw refuse(`no upgrade from store version ${from} to ${from + 1}`);
      upgrade(db);
    }
    if (version < target) setMeta(db, META.STORE_VERSION, target);
  }).immediate();
  return found;
}
