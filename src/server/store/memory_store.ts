/**
 * The store for `durability: "memory"`: messages live as long as the process. A Map keeps
 * insertion order, so `load()` returns arrival order.
 */
import type { Store, StoredMessage } from "./store.ts";

export class MemoryStore implements Store {
  readonly #messages = new Map<string, StoredMessage>();

  get size(): number {
    return this.#messages.size;
  }

  append(message: StoredMessage): void {
    this.#messages.set(message.id, message);
  }

  remove(id: string): void {
    this.#messages.delete(id);
  }

  load(): StoredMessage[] {
    return [...this.#messages.values()];
  }

  close(): void {
    this.#messages.clear();
  }
}
