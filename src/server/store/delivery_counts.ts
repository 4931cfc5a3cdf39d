/**
 * Delivery counts waiting to be written by the durable store (sqlite_store.ts).
 *
 * A delivery notes its count here (`note()`: two array pushes on the hot path, no I/O, no map).
 * Counts gather in a window of `delayMs`; when it ends, the counts of the messages still stored
 * (a removed message has no `position` any more) move to `due`, the highest per message, and the
 * next commit writes them: an UPDATE for a stored row, the INSERT for a pending append. A consumer
 * acks most deliveries within the window, and such a count never costs a write, nor even a map
 * entry: an ack does not look for its message here.
 */
import type { StoredMessage } from "./store.ts";

/**
 * What the broker passes as `deliveryCountDelayMs`: delivery counts are written for messages
 * still unacked this long after they were noted (a window of this length, written at the first
 * commit after it ends). A consumer acks most deliveries well within it, and such a count never
 * costs an UPDATE: drained at full speed with the counts written at the next commit, about four
 * deliveries in ten were still unacked then and cost one. A kill -9 may lose the counts of the
 * last window (a redelivery then shows one requeue less); a clean stop writes them.
 */
export const DELIVERY_COUNT_DELAY_MS = 100;

/** What one commit writes: UPDATEs (seq, count pairs) and the messages they are for. */
export interface CountUpdates {
  /** seq, count, seq, count, … (null: none). */
  updates: number[] | null;
  updated: StoredMessage[] | null;
  /** Counts left for the next commit (the per-commit bound was reached). */
  deferred: boolean;
}

export class DeliveryCounts {
  /** Counts the next commit writes: the highest per message (appended or loaded object). */
  due = new Map<StoredMessage, number>();
  /** Counts noted in the current window, in order; a message may appear more than once. */
  #recent: StoredMessage[] = [];
  #recentCounts: number[] = [];
  /** When the current window started (performance.now() ms). */
  #windowStart = 0;

  constructor(readonly delayMs: number) {}

  /** Messages with a count not written yet (those of the window counted once, removed ones not). Not for the hot path. */
  get pending(): number {
    if (this.#recent.length === 0) return this.due.size;
    const stored = new Set<StoredMessage>();
    for (const message of this.#recent) if (message.position !== undefined) stored.add(message);
    return this.due.size + stored.size;
  }

  get hasRecent(): boolean {
    return this.#recent.length > 0;
  }

  note(message: StoredMessage, deliveries: number): void {
    if (this.#recent.length === 0) this.#windowStart = performance.now();
    this.#recent.push(message);
    this.#recentCounts.push(deliveries);
  }

  /** A count written with the next commit, past the window (a nack with a delay: written with the delay). */
  dueNow(message: StoredMessage, deliveries: number): void {
    const noted = this.due.get(message);
    if (noted === undefined || deliveries > noted) this.due.set(message, deliveries);
  }

  /** A removed message: a count due for it is moot. (Those of the window are dropped when it ends.) */
  forget(message: StoredMessage): void {
    if (this.due.size > 0) this.due.delete(message);
  }

  /** Ends the current window once it is `delayMs` old, or at once with `force`: its counts become due. */
  closeWindow(force: boolean): void {
    const recent = this.#recent;
    if (recent.length === 0) return;
    if (!force && performance.now() - this.#windowStart < this.delayMs) return;
    const counts = this.#recentCounts;
    const due = this.due;
    for (let i = 0; i < recent.length; i++) {
      const message = recent[i]!;
      if (message.position === undefined) continue; // removed (acked) meanwhile: nothing to write
      const count = counts[i]!;
      const noted = due.get(message);
      if (noted === undefined || count > noted) due.set(message, count);
    }
    this.#recent = [];
    this.#recentCounts = [];
  }

  /**
   * The UPDATEs of the next commit, at most `budget` of them: none for a message whose append is
   * in the same commit (its INSERT writes the count), nor for one the store no longer holds.
   */
  updatesFor(appends: Map<number, StoredMessage>, budget: number): CountUpdates {
    const result: CountUpdates = { updates: null, updated: null, deferred: false };
    const due = this.due;
    if (due.size === 0) return result;
    for (const [message, count] of due) {
      const seq = message.position;
      if (seq === undefined) {
        due.delete(message); // never appended, or removed (a failed fsync append too)
        continue;
      }
      if (appends.has(seq)) continue;
      if (budget === 0) {
        result.deferred = true;
        break;
      }
      budget--;
      (result.updates ??= []).push(seq, count);
      (result.updated ??= []).push(message);
    }
    return result;
  }

  /** The count to INSERT for a pending append: the highest of its own and the one due. */
  forAppend(message: StoredMessage): number {
    const own = message.deliveries ?? 0;
    if (this.due.size === 0) return own;
    const noted = this.due.get(message);
    return noted !== undefined && noted > own ? noted : own;
  }

  /** A commit wrote `written`'s counts and the appends' ones. */
  committed(written: CountUpdates, appends: Map<number, StoredMessage>): void {
    if (this.due.size === 0) return;
    if (!written.deferred) {
      this.due = new Map();
      return;
    }
    // Rare (more than the bound at once): forget only what was written.
    if (written.updated !== null) for (const message of written.updated) this.due.delete(message);
    for (const message of appends.values()) this.due.delete(message);
  }

  clear(): void {
    this.due.clear();
    this.#recent = [];
    this.#recentCounts = [];
  }
}
