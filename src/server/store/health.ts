/**
 * Whether the durable store can write (sqlite_store.ts): healthy until a commit fails, healthy
 * again from the first one that succeeds, and the error that made it fail, which the refusals in
 * between name. Each change is logged once, not once per retry.
 */
import { KittenError } from "../../protocol/errors.ts";
import type { Logger } from "../log.ts";
import { describe } from "./database.ts";

export class StoreHealth {
  healthy: boolean;
  /** The error of the last failed write. */
  lastError: string;
  /** When an unhealthy store with nothing to retry last tried a write (performance.now()). */
  #probedAt = -Infinity;

  constructor(
    readonly directory: string,
    readonly log: Logger,
    opened: { healthy: boolean; lastError: string },
    readonly retryIntervalMs: number,
  ) {
    this.healthy = opened.healthy;
    this.lastError = opened.lastError;
  }

  /** STORE_UNAVAILABLE for a write that failed with `error`. */
  unavailable(error: unknown): KittenError {
    return new KittenError("STORE_UNAVAILABLE", `Cannot write to the store in "${this.directory}": ${describe(error)}`, undefined, {
      cause: error,
    });
  }

  /** A commit failed: returns the refusal for its senders. */
  failed(error: unknown): KittenError {
    this.lastError = describe(error);
    if (this.healthy) {
      this.healthy = false;
      this.log.error("store", `directory=${this.directory};commit failed, sends refused until it recovers: ${this.lastError}`);
    }
    return this.unavailable(error);
  }

  /** A write succeeded. */
  writable(): void {
    if (this.healthy) return;
    this.healthy = true;
    this.log.info("store", `directory=${this.directory};store writable again`);
  }

  /**
   * Unhealthy with nothing pending (the disk was full at open, or every failed append was
   * rejected): no retry will come, so a batch-mode append tries `write` (one small write) itself,
   * at most once per retry interval. True when the store can write again.
   */
  probe(pending: number, write: () => void): boolean {
    const now = performance.now();
    if (pending > 0 || now - this.#probedAt < this.retryIntervalMs) return false;
    this.#probedAt = now;
    try {
      write();
    } catch (error) {
      this.lastError = describe(error);
      return false;
    }
    this.writable();
    return true;
  }
}
