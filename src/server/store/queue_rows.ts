/**
 * The durable store's reads and writes by queue, for paging: one queue's rows in arrival order
 * from a position (through the `messages_by_queue` index), every row lazily, a purge of a queue's
 * rows from a position, and the per-queue usage (`queue_usage`, usage.ts). The store (sqlite_store.ts)
 * owns the connection and the group commit; it calls these with its pending work committed.
 */
import type { Database, Statement } from "bun:sqlite";
import { STORE_VERSION } from "../../version.ts";
import { decodeDeadLetter, decodeRecord, SQL } from "./record.ts";
import type { QueueUsage, StoredMessage } from "./store.ts";
import { StoreUsage, UsageDelta } from "./usage.ts";

/** A row as `SQL.selectQueue` returns it (`.values()`): the queue is the one asked for. */
type PageRow = [
  seq: number,
  id: string,
  destination: string,
  created: number,
  body: Uint8Array,
  deliveries: number,
  deadLetter: string | null,
  notBefore: number,
];

export class QueueRows {
  readonly usage: StoreUsage;
  readonly #addUsage: Statement<unknown, [queue: string, messages: number, bytes: number]>;
  readonly #selectQueue: Statement<unknown, [queue: string, from: number, limit: number]>;
  readonly #lastOfQueue: Statement<{ seq: number }, [queue: string]>;

  constructor(readonly db: Database) {
    this.usage = StoreUsage.read(db);
    this.#addUsage = db.prepare(SQL.addUsage);
    this.#selectQueue = db.prepare(SQL.selectQueue);
    this.#lastOfQueue = db.prepare(SQL.lastOfQueue);
  }

  /** Writes a commit's usage changes (inside its transaction). */
  writeUsage(delta: UsageDelta): void {
    delta.write(this.#addUsage);
  }

  /**
   * Up to `limit` rows of `queue` at or after `from`, in arrival order, each knowing its position.
   * The message made of a row shares its queue and destination strings (message.ts's routes).
   */
  read(queue: string, from: number, limit: number): StoredMessage[] {
    const rows = this.#selectQueue.values(queue, from, limit) as PageRow[];
    const messages: StoredMessage[] = new Array(rows.length);
    for (let i = 0; i < rows.length; i++) {
      const [seq, id, destination, created, body, deliveries, deadLetter, notBefore] = rows[i]!;
      const dead = deadLetter === null ? null : decodeDeadLetter(seq, deadLetter);
      messages[i] = { id, queue, destination, created, body, deliveries, deadLetter: dead, notBefore, position: seq };
    }
    return messages;
  }

  /** The position of the newest committed row of `queue` (0 when it has none). */
  lastPosition(queue: string): number {
    return this.#lastOfQueue.get(queue)?.seq ?? 0;
  }

  /** The ids of the `limit` newest rows, oldest first. */
  newestIds(limit: number): string[] {
    if (limit <= 0) return [];
    const rows = this.db.query<unknown, [number]>(SQL.newestIds).values(limit) as [string][];
    const ids: string[] = new Array(rows.length);
    for (let i = 0; i < rows.length; i++) ids[rows.length - 1 - i] = rows[i]![0];
    return ids;
  }

  /** Every row in arrival order, read as iterated. */
  *scan(): IterableIterator<StoredMessage> {
    for (const row of this.db.query(SQL.selectAll).iterate()) yield decode(Object.values(row as Record<string, unknown>));
  }

  /** Deletes the rows of `queue` at or after `from` (of one destination, or all) in one transaction; returns how many. */
  purgeFrom(queue: string, from: number, destination?: string): number {
    const delta = new UsageDelta();
    let purged = 0;
    this.db.transaction(() => {
      const [measure, remove, params] = destination === undefined
        ? [SQL.measureFrom, SQL.deleteFrom, [queue, from]]
        : [SQL.measureFromTo, SQL.deleteFromTo, [queue, from, destination]];
      const { messages, bytes } = this.db.query<QueueUsage, (string | number)[]>(measure).get(...params)!;
      this.db.query<unknown, (string | number)[]>(remove).run(...params);
      delta.subtract(queue, messages, bytes);
      this.writeUsage(delta);
      purged = messages;
    }).immediate();
    this.usage.apply(delta);
    return purged;
  }

  finalize(): void {
    this.#addUsage.finalize();
    this.#selectQueue.finalize();
    this.#lastOfQueue.finalize();
  }
}

function decode(row: unknown[]): StoredMessage {
  const message = decodeRecord(STORE_VERSION, row);
  message.position = row[0] as number;
  return message;
}
