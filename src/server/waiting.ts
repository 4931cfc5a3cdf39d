/**
 * The waiting list of one queue: copies nobody can receive yet, kept in arrival order
 * (`message.seq`) so that ttl expiry, overflow and hand-out always take the oldest first.
 *
 * A Set keeps insertion order and deletes in O(1). New messages arrive in order; copies given back
 * by a group that lost its handlers are older: they mark the list unsorted, and it is sorted once
 * before it is next read in order. Copies recovered from the store at start do not count towards
 * the bound (see Queue.restore()).
 */
import type { Copy } from "./message.ts";

export class WaitingList {
  readonly #copies = new Set<Copy>();
  /** Highest `message.seq` added; adding a lower one leaves the list unsorted. */
  #lastSeq = -1;
  #unsorted = false;
  #recovered = 0;

  get size(): number {
    return this.#copies.size;
  }

  /** Copies that count towards `maxItemsInQueue` (every one but the recovered). */
  get bounded(): number {
    return this.#copies.size - this.#recovered;
  }

  add(copy: Copy): void {
    this.#copies.add(copy);
    if (copy.recovered) this.#recovered++;
    if (copy.message.seq < this.#lastSeq) this.#unsorted = true;
    else this.#lastSeq = copy.message.seq;
  }

  delete(copy: Copy): boolean {
    if (!this.#copies.delete(copy)) return false;
    if (copy.recovered) this.#recovered--;
    return true;
  }

  /**
   * Removes and returns the oldest copies that count towards the bound, until at most `max`
   * remain: the overflow, oldest first.
   */
  overflow(max: number): Copy[] {
    const dropped: Copy[] = [];
    if (this.bounded <= max) return dropped;
    for (const copy of this.ordered()) {
      if (this.bounded <= max) break;
      if (copy.recovered) continue;
      this.delete(copy);
      dropped.push(copy);
    }
    return dropped;
  }

  /** Removes and returns the copies whose message arrived at or before `cutoff` (ms). */
  expire(cutoff: number): Copy[] {
    const expired: Copy[] = [];
    for (const copy of this.ordered()) {
      if (copy.message.created > cutoff) break;
      expired.push(copy);
    }
    for (const copy of expired) this.delete(copy);
    return expired;
  }

  /** The copies, oldest first (sorts once if copies came back out of order). */
  ordered(): Iterable<Copy> {
    if (this.#unsorted) {
      this.#unsorted = false;
      const sorted = [...this.#copies].sort((a, b) => a.message.seq - b.message.seq);
      this.#copies.clear();
      for (const copy of sorted) this.#copies.add(copy);
    }
    return this.#copies;
  }
}
