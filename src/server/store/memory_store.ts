/**
 * The store for `durability: "memory"`: messages live as long as the process. A Set of the
 * message objects keeps arrival order for `load()` and hashes by identity, which costs far less
 * per message than a map keyed by id string.
 */
import type { Store, StoredMessage } from "./store.ts";

export class MemoryStore implements Store {
  readonly #messages = new Set<StoredMessage>();
  readonly #meta = new Map<string, string | number>();

  get size(): number {
    return this.#messages.size;
  }

  append(message: StoredMessage): void {
    this.#messages.add(message);
  }

  remove(message: StoredMessage): void {
    this.#messages.delete(message);
  }

  load(): StoredMessage[] {
    return [...this.#messages];
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
