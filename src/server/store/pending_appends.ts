/**
 * The appends waiting for the store's next commit (sqlite_store.ts): by position, in arrival
 * order; which of them were made in fsync mode (confirmed only by the commit that holds them); and
 * the promise their senders wait on, one per batch.
 */
import type { DurableMode, StoredMessage } from "./store.ts";
import { mayOutliveItsWaiters } from "../internal/promises.ts";

export class PendingAppends {
  /** By position, in arrival order. Replaced, not cleared, by a commit: a caller may hold the old one. */
  messages = new Map<number, StoredMessage>();
  /**
   * Positions of the appends made in the other mode than the store's (a channel's own
   * durability): the usual append costs no entry here.
   */
  readonly #otherMode = new Set<number>();
  #batch: PromiseWithResolvers<void> | null = null;

  constructor(readonly mode: DurableMode) {}

  get size(): number {
    return this.messages.size;
  }

  /** Adds an append: in fsync mode, returns the promise of its batch (batch mode confirms at once). */
  add(seq: number, message: StoredMessage, mode: DurableMode): Promise<void> | undefined {
    this.messages.set(seq, message);
    if (mode !== this.mode) this.#otherMode.add(seq);
    if (mode === "batch") return undefined;
    if (this.#batch === null) {
      this.#batch = Promise.withResolvers<void>();
      mayOutliveItsWaiters(this.#batch.promise); // a failed commit rejects it
    }
    return this.#batch.promise;
  }

  /** A remove before the commit: true when the append was pending (both are cancelled). */
  cancel(seq: number): boolean {
    if (!this.messages.delete(seq)) return false;
    if (this.#otherMode.size > 0) this.#otherMode.delete(seq);
    return true;
  }

  /** A commit begins: the batch whose senders it answers (resolve or reject), and no later append's. */
  takeBatch(): PromiseWithResolvers<void> | null {
    const batch = this.#batch;
    this.#batch = null;
    return batch;
  }

  /** The commit holding every pending append succeeded. */
  committed(): void {
    this.messages = new Map();
    if (this.#otherMode.size > 0) this.#otherMode.clear();
  }

  /**
   * A commit failed: the fsync appends are forgotten (their senders are told by the batch's
   * rejection), the batch-mode ones stay, confirmed already, for the retry. Returns how many
   * were forgotten.
   */
  failed(): number {
    let forgotten = 0;
    for (const [seq, message] of this.messages) {
      if ((this.mode === "fsync") === this.#otherMode.has(seq)) continue; // a batch-mode append
      message.position = undefined;
      this.messages.delete(seq);
      this.#otherMode.delete(seq);
      forgotten++;
    }
    return forgotten;
  }


  clear(): void {
    this.messages.clear();
    this.#otherMode.clear();
  }
}
