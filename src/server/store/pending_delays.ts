/**
 * Delayed requeues waiting to be written by the durable store (sqlite_store.ts): when a message
 * nacked with a delay is due, the latest noted per message, written with the next commit (an
 * UPDATE of a stored row; the INSERT of a pending append carries it instead). A restart then
 * keeps the delay: the row is read back with its `not_before` and the message waits for it.
 *
 * No wait as for delivery counts (delivery_counts.ts): a nack with a delay is an application
 * asking for a pause, far rarer than a delivery, and the message is not acked soon after it.
 */
import type { StoredMessage } from "./store.ts";

/** What one commit writes: UPDATEs (seq, notBefore pairs) and the messages they are for. */
export interface DelayUpdates {
  /** seq, notBefore, seq, notBefore, … (null: none). */
  updates: number[] | null;
  readonly written: readonly StoredMessage[];
  /** Delays left for the next commit (the per-commit bound was reached). */
  deferred: boolean;
}

const NONE: DelayUpdates = Object.freeze({ updates: null, written: Object.freeze([]), deferred: false });

export class PendingDelays {
  /** Appended (or loaded) object → when its delayed requeue is due (ms since epoch). */
  readonly #due = new Map<StoredMessage, number>();

  get size(): number {
    return this.#due.size;
  }

  /** The messages whose delay is due to be written. */
  messages(): IterableIterator<StoredMessage> {
    return this.#due.keys();
  }

  note(message: StoredMessage, notBefore: number): void {
    this.#due.set(message, notBefore);
  }

  /** A removed message: its delay is moot. */
  forget(message: StoredMessage): void {
    if (this.#due.size > 0) this.#due.delete(message);
  }

  /** The `not_before` to INSERT for a pending append: a delay noted meanwhile, or the one it came with. */
  forAppend(message: StoredMessage): number {
    if (this.#due.size > 0) {
      const noted = this.#due.get(message);
      if (noted !== undefined) return noted;
    }
    return message.notBefore ?? 0;
  }

  /**
   * The UPDATEs of the next commit, at most `budget` of them: none for a message whose append is
   * in the same commit (its INSERT writes the delay), nor for one the store no longer holds.
   */
  updatesFor(appends: Map<number, StoredMessage>, budget: number): DelayUpdates {
    if (this.#due.size === 0) return NONE; // the usual commit: nothing allocated
    const written: StoredMessage[] = [];
    const result: DelayUpdates = { updates: null, written, deferred: false };
    for (const [message, notBefore] of this.#due) {
      const seq = message.position;
      if (seq === undefined) {
        this.#due.delete(message); // removed, or its fsync append failed
        continue;
      }
      if (appends.has(seq)) {
        written.push(message);
        continue;
      }
      if (budget === 0) {
        result.deferred = true;
        break;
      }
      budget--;
      (result.updates ??= []).push(seq, notBefore);
      written.push(message);
    }
    return result;
  }

  /** The commit holding `written` succeeded. (A failed one leaves them due, to be tried again.) */
  committed(written: DelayUpdates): void {
    if (written === NONE) return;
    for (const message of written.written) this.#due.delete(message);
  }

  clear(): void {
    this.#due.clear();
  }
}
