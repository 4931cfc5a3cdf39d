/**
 * Sends a master confirms once the in-sync set holds the log up to their entry, oldest first.
 * The sends of one burst are streamed in the same writes and acknowledged together, so they wait
 * as one (for the newest index among them), which saves a promise per send.
 */
import type { KittenError } from "../../protocol/errors.ts";
import { Deque } from "../internal/deque.ts";
import { mayOutliveItsWaiters } from "../internal/promises.ts";

interface Waiter {
  index: number;
  promise: Promise<void>;
  resolve(): void;
  reject(error: KittenError): void;
}

export class ConfirmWaiters {
  readonly #waiters = new Deque<Waiter>();
  /** The waiter the sends of the current burst join (the newest one), until the burst ends or it settles. */
  #open: Waiter | null = null;

  get length(): number {
    return this.#waiters.length;
  }

  /** Resolves once `settle` reaches `index` (log indexes only grow, burst after burst). */
  wait(index: number): Promise<void> {
    const open = this.#open;
    if (open !== null) {
      open.index = Math.max(open.index, index);
      return open.promise;
    }
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    const waiter = { index, promise: mayOutliveItsWaiters(promise), resolve, reject };
    this.#waiters.push(waiter);
    this.#open = waiter;
    return promise;
  }

  /** The burst is over: the next send waits on its own. */
  endBurst(): void {
    this.#open = null;
  }

  /** The in-sync set holds the log up to `upTo`. */
  settle(upTo: number): void {
    while (this.#waiters.length > 0 && this.#waiters.peek()!.index <= upTo) {
      const waiter = this.#waiters.shift()!;
      if (waiter === this.#open) this.#open = null; // settled: a later send may not join it
      waiter.resolve();
    }
  }

  failAll(error: KittenError): void {
    this.#open = null;
    for (let waiter = this.#waiters.shift(); waiter; waiter = this.#waiters.shift()) waiter.reject(error);
  }
}
