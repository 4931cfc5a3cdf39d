/**
 * The store's small named values (the `meta` table: `epoch`, the replication position, the store
 * version, …): read, written at once in a transaction of their own, or written with the next
 * commit (sqlite_store.ts runs `writePending` inside it), for values that are only a lower bound
 * and need not cost a transaction and its fsync of their own.
 */
import type { Database } from "bun:sqlite";
import { getMeta, type MetaValue, setMeta } from "./record.ts";

export class MetaValues {
  /** Values for the next commit, the latest per key. */
  #pending = new Map<string, MetaValue>();

  constructor(readonly db: Database) {}

  /** Values waiting for the next commit. */
  get pending(): number {
    return this.#pending.size;
  }

  get(key: string): MetaValue | null {
    return getMeta(this.db, key);
  }

  /** Writes now, in a transaction of its own; a value waiting for the next commit under `key` is older, and dropped. */
  set(key: string, value: MetaValue): void {
    this.#pending.delete(key);
    setMeta(this.db, key, value);
  }

  /** Kept for the next commit. */
  setWithNextCommit(key: string, value: MetaValue): void {
    this.#pending.set(key, value);
  }

  /** Inside a commit's transaction: writes the values waiting. */
  writePending(): void {
    for (const [key, value] of this.#pending) setMeta(this.db, key, value);
  }

  /** Drops the values waiting: the commit that wrote them succeeded, or the store closes. */
  clear(): void {
    if (this.#pending.size > 0) this.#pending = new Map();
  }
}
