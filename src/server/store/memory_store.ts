/**
 * A Store kept in process memory: messages live as long as the process. The broker itself runs
 * `durability: "memory"` with no store at all (queues hold the messages); this one is for tests:
 * the store conformance suite and brokers whose store must be controlled (slow, failing). A Map keyed by the
 * message objects keeps arrival order for `load()` and hashes by identity, which costs far less
 * per message than a map keyed by id string; its value is what was noted for the message: the
 * highest delivery count (`noteDelivery`) and the latest delay (`noteDelay`).
 *
 * The appended objects are never written to (the broker's own `deliveries` field means something
 * else). `load()` returns plain records with `deliveries`, `deadLetter` and `notBefore` set; `remove()`,
 * `noteDelivery()` and `noteDelay()` accept them as well as the appended objects.
 */
import type { Store, StoredMessage } from "./store.ts";

interface Noted {
  deliveries: number;
  notBefore: number;
}

export class MemoryStore implements Store {
  /** Appended object → what was noted for it, in arrival order. */
  readonly #messages = new Map<StoredMessage, Noted>();
  /** Object returned by `load()` → the appended object it stands for. */
  readonly #loaded = new WeakMap<StoredMessage, StoredMessage>();
  readonly #meta = new Map<string, string | number>();

  get size(): number {
    return this.#messages.size;
  }

  append(message: StoredMessage): void {
    this.#messages.set(message, { deliveries: message.deliveries ?? 0, notBefore: message.notBefore ?? 0 });
  }

  remove(message: StoredMessage): void {
    this.#messages.delete(this.#loaded.get(message) ?? message);
  }

  noteDelivery(message: StoredMessage, deliveries: number): void {
    const noted = this.#messages.get(this.#loaded.get(message) ?? message);
    if (noted !== undefined && deliveries > noted.deliveries) noted.deliveries = deliveries;
  }

  noteDelay(message: StoredMessage, notBefore: number, deliveries = 0): void {
    const noted = this.#messages.get(this.#loaded.get(message) ?? message);
    if (noted === undefined) return;
    noted.notBefore = notBefore;
    if (deliveries > noted.deliveries) noted.deliveries = deliveries;
  }

  load(): StoredMessage[] {
    const records: StoredMessage[] = [];
    for (const [message, { deliveries, notBefore }] of this.#messages) {
      const { id, queue, destination, body, created } = message;
      const record: StoredMessage = { id, queue, destination, body, created, deliveries, deadLetter: message.deadLetter ?? null, notBefore };
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

  setMetaWithNextCommit(key: string, value: string | number): void {
    this.#meta.set(key, value);
  }

  close(): void {
    this.#messages.clear();
  }
}
