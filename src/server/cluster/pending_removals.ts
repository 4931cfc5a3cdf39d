/**
 * A slave's removals not applied yet. The master's REMOVE entries wait here until the master
 * says every in-sync replica holds the log past them (CONFIRMED): a removal applied earlier could
 * not be taken back if the next master never received it, and the slave would lack a message that
 * master still holds.
 */
import { Deque } from "../internal/deque.ts";

export class PendingRemovals {
  readonly #entries = new Deque<[index: number, ids: string[]]>();
  #ids = 0;

  /** Message ids waiting. */
  get size(): number {
    return this.#ids;
  }

  add(index: number, ids: string[]): void {
    this.#entries.push([index, ids]);
    this.#ids += ids.length;
  }

  /** Hands every removal up to `index` to `apply`, oldest first. */
  applyUpTo(index: number, apply: (ids: string[]) => void): void {
    while (this.#entries.length > 0 && this.#entries.peek()![0] <= index) {
      const [, ids] = this.#entries.shift()!;
      this.#ids -= ids.length;
      apply(ids);
    }
  }

  /** Forgets the removals after `index` (the slave went back to it). */
  dropAfter(index: number): void {
    while (this.#entries.length > 0 && this.#entries.last()![0] > index) this.#ids -= this.#entries.pop()![1].length;
  }

  clear(): void {
    this.#entries.clear();
    this.#ids = 0;
  }
}
