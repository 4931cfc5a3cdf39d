/**
 * Delivery counts waiting to be written by the durable store (sqlite_store.ts).
 *
 * A delivery notes its count here (`note()`: two array pushes on the hot path, no I/O, no map,
 * no clock). Each commit stamps the counts noted since the one before with its time (`ripen()`):
 * a count is at least as old as its stamp. Once a stamp is `delayMs` old, the counts under it
 * whose message the store still holds (a removed message has no `position` any more) move to
 * `due`, the highest per message, and the next commit writes them: an UPDATE for a stored row,
 * the INSERT for a pending append. A consumer acks most deliveries well within `delayMs`, and
 * such a count never costs a write, nor even a map entry: an ack does not look for its message
 * here. A count is written between `delayMs` and `delayMs` plus the time between two commits
 * after its delivery.
 */
import { Deque } from "../internal/deque.ts";
import type { StoredMessage } from "./store.ts";

/**
 * What the broker passes as `deliveryCountDelayMs`: delivery counts are written for messages
 * still unacked this long after their delivery. A consumer acks most deliveries well within it,
 * and such a count never costs an UPDATE: drained at full speed with the counts written at the
 * next commit, about four deliveries in ten were still unacked then and cost one. A kill -9 may
 * lose the counts of about the last `DELIVERY_COUNT_DELAY_MS` (a redelivery then shows one
 * requeue less); a clean stop writes them.
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

/** The counts one commit stamped: noted before `at` (performance.now() ms). */
interface Stamped {
  at: number;
  messages: StoredMessage[];
  counts: number[];
}

export class DeliveryCounts {
  /** Counts the next commit writes: the highest per message (appended or loaded object). */
  due = new Map<StoredMessage, number>();
  /** Counts noted since the last commit stamped them; a message may appear more than once. */
  #noted: StoredMessage[] = [];
  #notedCounts: number[] = [];
  /** Counts stamped and not due yet, oldest first. */
  readonly #stamped = new Deque<Stamped>();

  constructor(readonly delayMs: number, readonly now: () => number = () => performance.now()) {}

  /** Messages with a count not written yet (those noted counted once, removed ones not). Not for the hot path. */
  get pending(): number {
    const stored = new Set<StoredMessage>();
    const add = (messages: StoredMessage[]) => {
      for (const message of messages) if (message.position !== undefined && !this.due.has(message)) stored.add(message);
    };
    for (const stamped of this.#stamped) add(stamped.messages);
    add(this.#noted);
    return this.due.size + stored.size;
  }

  /** Counts noted and not due yet. */
  get hasRecent(): boolean {
    return this.#noted.length > 0 || this.#stamped.length > 0;
  }

  /** Notes a delivery's count; true when it is the first since the last stamp (a commit should come soon to stamp it). */
  note(message: StoredMessage, deliveries: number): boolean {
    this.#noted.push(message);
    this.#notedCounts.push(deliveries);
    return this.#noted.length === 1;
  }

  /** A count written with the next commit, past the delay (a nack with a delay: written with the delay). */
  dueNow(message: StoredMessage, deliveries: number): void {
    const noted = this.due.get(message);
    if (noted === undefined || deliveries > noted) this.due.set(message, deliveries);
  }

  /** A removed message: a count due for it is moot. (Those not due yet are dropped when they ripen.) */
  forget(message: StoredMessage): void {
    if (this.due.size > 0) this.due.delete(message);
  }

  /**
   * A commit begins: the counts noted since the last one are stamped with this time, and those
   * under a stamp at least `delayMs` old (every one with `force`) become due.
   */
  ripen(force: boolean): void {
    if (!this.hasRecent) return;
    const now = this.now();
    if (this.#noted.length > 0) {
      this.#stamped.push({ at: now, messages: this.#noted, counts: this.#notedCounts });
      this.#noted = [];
      this.#notedCounts = [];
    }
    for (let oldest = this.#stamped.peek(); oldest && (force || now - oldest.at >= this.delayMs); oldest = this.#stamped.peek()) {
      this.#stamped.shift();
      this.#makeDue(oldest);
    }
  }

  /** When the oldest stamped counts become due (ms from now), or null when none are stamped. */
  nextDueInMs(): number | null {
    const oldest = this.#stamped.peek();
    return oldest === undefined ? null : Math.max(0, oldest.at + this.delayMs - this.now());
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
    this.#noted = [];
    this.#notedCounts = [];
    this.#stamped.clear();
  }

  /** The stamped counts of messages still stored become due, the highest per message. */
  #makeDue({ messages, counts }: Stamped): void {
    const due = this.due;
    for (let i = 0; i < messages.length; i++) {
      const message = messages[i]!;
      if (message.position === undefined) continue; // removed (acked) meanwhile: nothing to write
      const count = counts[i]!;
      const noted = due.get(message);
      if (noted === undefined || count > noted) due.set(message, count);
    }
  }
}
