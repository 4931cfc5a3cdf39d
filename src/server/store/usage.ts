/**
 * How much of the store each queue takes: rows and estimated bytes (`rowBytes`), kept in the
 * `queue_usage` table by each commit and mirrored here, so that the admin API, the metrics and a
 * restart read it without touching the disk.
 *
 * A commit gathers its per-queue changes in a `UsageDelta` (a Map get and two additions per row),
 * writes one UPSERT per queue inside its transaction, and applies the delta here only once the
 * commit succeeded: a rolled-back commit leaves both the table and this mirror as they were.
 */
import type { Database, Statement } from "bun:sqlite";
import { rowBytes, SQL } from "./record.ts";

/** One queue's share of the store. */
export interface QueueUsage {
  /** Messages stored (rows). */
  messages: number;
  /** Estimated bytes of those rows on disk. */
  bytes: number;
}

/** The per-queue changes of one commit. */
export class UsageDelta {
  readonly #byQueue = new Map<string, QueueUsage>();

  get size(): number {
    return this.#byQueue.size;
  }

  add(message: { queue: string; body: Uint8Array; id: string; destination: string }, sign: 1 | -1): void {
    let delta = this.#byQueue.get(message.queue);
    if (delta === undefined) this.#byQueue.set(message.queue, delta = { messages: 0, bytes: 0 });
    delta.messages += sign;
    delta.bytes += sign * rowBytes(message);
  }

  /** Writes the changes (inside the caller's transaction). */
  write(statement: Statement<unknown, [string, number, number]>): void {
    for (const [queue, delta] of this.#byQueue) statement.run(queue, delta.messages, delta.bytes);
  }

  entries(): IterableIterator<[string, QueueUsage]> {
    return this.#byQueue.entries();
  }
}

export class StoreUsage {
  readonly #byQueue = new Map<string, QueueUsage>();

  /** Reads the table (at open). */
  static read(db: Database): StoreUsage {
    const usage = new StoreUsage();
    for (const row of db.query<{ queue: string; messages: number; bytes: number }, []>(SQL.usage).all()) {
      usage.#byQueue.set(row.queue, { messages: row.messages, bytes: row.bytes });
    }
    return usage;
  }

  /** Applies a committed delta; queues left with no rows are forgotten. */
  apply(delta: UsageDelta): void {
    for (const [queue, change] of delta.entries()) {
      const usage = this.#byQueue.get(queue) ?? { messages: 0, bytes: 0 };
      usage.messages += change.messages;
      usage.bytes += change.bytes;
      if (usage.messages <= 0) this.#byQueue.delete(queue);
      else this.#byQueue.set(queue, usage);
    }
  }

  get(queue: string): QueueUsage {
    const usage = this.#byQueue.get(queue);
    return usage ? { ...usage } : { messages: 0, bytes: 0 };
  }

  /** Every queue with stored rows. */
  all(): Map<string, QueueUsage> {
    return new Map([...this.#byQueue].map(([queue, usage]) => [queue, { ...usage }]));
  }
}
