/**
 * A Store kept in process memory: messages live as long as the process. The broker itself runs
 * `durability: "memory"` with no store at all (queues hold the messages); this one is for tests:
 * the store conformance suite and brokers whose store must be controlled (slow, failing). A Map keyed by the
 * message objects keeps arrival order for `load()` and hashes by identity, which costs far less
 * per message than a map keyed by id string; its value is the message's record: the highest
 * delivery count noted (`noteDelivery`).
 *
 * The appended objects are never written to (the broker's own `deliveries` field means something
 * else). `load()` returns plain records with `deliveries` and `deadLetter` set; `remove()` and
 * `noteDelivery()` accept them as well as the appended objects.
 */
import type { Store, StoredMessage } from "./store.ts";

export class MemoryStore implements Store {
  /** Appended object → highest delivery count, in arrival order. */
  readonly #messages = new Map<StoredMessage, number>();
  /** Object returned by `load()` → the appended object it stands for. */
  readonly #loaded = new WeakMap<StoredMessage, StoredMessage>();
  readonly #meta = new Map<string, string | number>();

  get size(): number {
    return this.#messages.size;
  }

  append(message: StoredMessage): void {
    this.#messages.set(message, message.deliveries ?? 0);
  }

  remove(message: StoredMessage): void {
    this.#messages.delete(this.#loaded.get(message) ?? message);
  }

  noteDelivery(message: StoredMessage, deliveries: number): void {
    const key = this.#loaded.get(message) ?? message;
    const noted = this.#messages.get(key);
    if (noted !== undefined && deliveries > noted) this.#messages.set(key, deliveries);
  }

  load(): StoredMessage[] {
    const records: StoredMessage[] = [];
    for (const [message, deliveries] of this.#messages) {
      const { id, queue, destination, body, created } = message;
      const record: StoredMessage = { id, queue, destination, body, created, deliveries, deadLetter: message.deadLetter ?? null };
      this.#loaded.set(record, message);
      records.push(record);
    }
    return records;
  }

  meta(key: string): string | number | null {
    return this.#meta.get(key) ?? null;
  }

  setMeta(key: string, value: string | number): void {
    this.#meta.set(key, value);
  }

  close(): void {
    this.#messages.clear();
  }
}
