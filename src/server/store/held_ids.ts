/**
 * Whether the store holds a message, asked by id: a slave's check for messages its master
 * streams or removes that it holds on disk only (paged). Only brokers in a cluster ask, so the
 * index by id is kept by them alone (each message costs 0.3–1.5 µs more to store and delete with
 * it, more the more rows are held); a store opened without it builds it when first asked. A row
 * whose delete is pending counts as gone.
 */
import type { Database, Statement } from "bun:sqlite";
import type { Logger } from "../log.ts";
import { describe } from "./database.ts";
import { IdCounts } from "./id_counts.ts";
import { SQL } from "./record.ts";
import type { StoredMessage } from "./store.ts";

/** After a failed build of the index (a full disk), how long before it is tried again. */
export const RETRY_BUILD_MS = 10_000;

export class HeldIds {
  readonly #db: Database;
  readonly #log: Logger;
  readonly #directory: string;
  readonly #holds: Statement<unknown, [id: string]>;
  readonly #now: () => number;
  #indexed: boolean;
  #failedAt = -Infinity;
  /**
   * Ids of rows whose delete is not committed yet, by count; kept only once `holds()` was asked
   * (a slave), so that a master's acks pay nothing for it.
   */
  #removing: IdCounts | null = null;

  constructor(db: Database, indexed: boolean, log: Logger, directory: string, now: () => number = () => performance.now()) {
    this.#db = db;
    this.#now = now;
    this.#indexed = indexed;
    this.#log = log;
    this.#directory = directory;
    this.#holds = db.prepare(SQL.holds);
  }

  /**
   * True when a committed row holds this message and its delete is not pending. `pending`: the
   * removes not committed yet (what the pending count starts from when first asked).
   */
  holds(messageId: string, pending: readonly StoredMessage[]): boolean {
    if (!this.#indexed && !this.#buildIndex()) return false;
    if (this.#removing === null) {
      this.#removing = new IdCounts();
      for (const message of pending) this.removing(message.id);
    }
    if (this.#removing.has(messageId)) return false;
    return this.#holds.get(messageId) !== null;
  }

  /** A remove of this message's row is pending. */
  removing(messageId: string): void {
    this.#removing?.add(messageId);
  }

  /** The deletes of the first `count` of `removed` were committed. */
  deleted(removed: readonly StoredMessage[], count: number): void {
    const removing = this.#removing;
    if (removing === null) return;
    for (let i = 0; i < count; i++) removing.delete(removed[i]!.id);
  }

  /** The pending removes were dropped (the store closes). */
  clear(): void {
    this.#removing = null;
  }

  finalize(): void {
    this.#holds.finalize();
  }

  /** One statement whose time grows with the rows held: once, when a lone broker joined a cluster. */
  #buildIndex(): boolean {
    const started = this.#now();
    if (started - this.#failedAt < RETRY_BUILD_MS) return false;
    try {
      this.#db.run(SQL.indexById);
    } catch (error) {
      this.#failedAt = started;
      this.#log.warn("store", `directory=${this.#directory};cannot build the index of messages by id: ${describe(error)}; messages held on disk only are not found until it is built`);
      return false;
    }
    this.#indexed = true;
    this.#log.info("store", `directory=${this.#directory};elapsedMs=${(this.#now() - started).toFixed(0)};built the index of messages by id`);
    return true;
  }
}
