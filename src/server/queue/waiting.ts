/**
 * Where the copies of one queue go while nobody can receive them.
 *
 * `WaitingList` keeps them in arrival order (`message.seq`) so that ttl expiry, overflow and
 * hand-out always take the oldest first. New messages arrive in order; copies given back by a
 * group that lost its handlers are older: they mark the list unsorted, and it is sorted once
 * before it is next read in order. Copies recovered
 * from the store at start do not count towards the bound (see Queue.restore()).
 *
 * `Parking` puts copies into that list, bounded by `maxItemsInQueue` (the oldest are dropped
 * first) and by `ttl`. A slave drops nothing on its own account: the master still serves those
 * copies. The queue takes copies back out when a recipient registers (see Queue.subscribe()).
 */
import type { ChannelSettings } from "../config/config.ts";
import { type Copy, CopyState, type Group } from "./message.ts";

export class WaitingList {
  /**
   * The copies in list order. A deleted copy leaves a null, skipped when read and dropped when
   * the list is compacted: an array slot costs 8 bytes a copy, where a Set entry cost about 40.
   * A copy in the list keeps its slot's index in `copy.at` (unused while a copy waits), so that
   * delete is O(1).
   */
  #slots: (Copy | null)[] = [];
  /** Slots before this index are all null. */
  #head = 0;
  #size = 0;
  /** Highest `message.seq` added; adding a lower one leaves the list unsorted. */
  #lastSeq = -1;
  #unsorted = false;
  #recovered = 0;

  get size(): number {
    return this.#size;
  }

  /** Copies that count towards `maxItemsInQueue` (every one but the recovered). */
  get bounded(): number {
    return this.#size - this.#recovered;
  }

  has(copy: Copy): boolean {
    const at = copy.at;
    return at >= this.#head && at < this.#slots.length && this.#slots[at] === copy;
  }

  add(copy: Copy): void {
    if (this.has(copy)) return;
    // Nulls left by deletes past half the slots: compacted before they outweigh the copies.
    if (this.#slots.length - this.#head > 2 * this.#size + 64) this.#compact(false);
    copy.at = this.#slots.length;
    this.#slots.push(copy);
    this.#size++;
    if (copy.recovered) this.#recovered++;
    if (copy.message.seq < this.#lastSeq) this.#unsorted = true;
    else this.#lastSeq = copy.message.seq;
  }

  delete(copy: Copy): boolean {
    if (!this.has(copy)) return false;
    this.#slots[copy.at] = null;
    copy.at = -1;
    this.#size--;
    if (copy.recovered) this.#recovered--;
    if (this.#size === 0) {
      this.#slots = [];
      this.#head = 0;
    } else {
      while (this.#slots[this.#head] === null) this.#head++;
    }
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

  /**
   * The copies, oldest first (sorts once if copies came back out of order). Copies may be deleted
   * while this is read: a deleted one is not given. A compaction meanwhile makes a new array, so
   * the reading goes on over the one it started with.
   */
  ordered(): Iterable<Copy> {
    if (this.#unsorted) this.#compact(true);
    const slots = this.#slots;
    const start = this.#head;
    return {
      [Symbol.iterator]: () => {
        let at = start;
        return {
          next: (): IteratorResult<Copy> => {
            while (at < slots.length) {
              const index = at++;
              const copy = slots[index];
              if (!copy) continue;
              // In the current array a copy is in the list at its own slot only (one deleted and
              // added again has a later slot); in an array compacted away, wherever it is now.
              if (slots === this.#slots ? copy.at === index : this.has(copy)) return { value: copy, done: false };
            }
            return { value: undefined, done: true };
          },
        };
      },
    };
  }

  /** Drops the nulls (and sorts by arrival when `sort`), into a new array: readers keep the old one. */
  #compact(sort: boolean): void {
    const copies: Copy[] = [];
    for (let at = this.#head; at < this.#slots.length; at++) {
      const copy = this.#slots[at];
      if (copy) copies.push(copy);
    }
    if (sort) {
      copies.sort((a, b) => a.message.seq - b.message.seq);
      this.#unsorted = false;
    }
    for (let at = 0; at < copies.length; at++) copies[at]!.at = at;
    this.#slots = copies;
    this.#head = 0;
  }
}

/** What parking reads from its queue, at each use: settings change on reload, `mirroring` on promotion. */
export interface ParkingQueue {
  readonly settings: ChannelSettings;
  readonly mirroring: boolean;
  /** Messages paged to the store that count towards the bound (they may all be waiting). */
  readonly backlog: { readonly bounded: number };
}

export class Parking {
  /** Copies nobody can receive yet, oldest first. */
  readonly waiting = new WaitingList();
  /** Copies to park when the current unsubscribe, removeIds or tick ends (null outside them). */
  #batch: Copy[] | null = null;

  constructor(
    readonly queue: ParkingQueue,
    /** Drops a copy past the bound or its ttl; the queue counts and settles it. */
    readonly drop: (copy: Copy, reason: "overflow" | "ttl") => void,
  ) {}

  /**
   * Takes out of the waiting list, oldest first, the copies a group that just gained `ids` may
   * have: copies waiting for anyone sent to one of them (or to `*`), and that group's own copies.
   * Groups are compared by key: a group is re-created when its handlers come back.
   */
  takeFor(group: Group, ids: ReadonlySet<string>): Copy[] {
    const waiting = this.waiting;
    if (waiting.size === 0 || ids.size === 0) return [];
    const all = ids.has("*");
    const due: Copy[] = [];
    for (const copy of waiting.ordered()) {
      const isDue = copy.group === null
        ? all || copy.destination === "*" || ids.has(copy.destination)
        : copy.group.key === group.key && (all || ids.has(copy.destination));
      if (isDue) due.push(copy);
    }
    for (const copy of due) waiting.delete(copy);
    return due;
  }

  /** Puts a copy in the waiting list; when full, the oldest waiting copy is dropped first. */
  park(copy: Copy): void {
    if (this.#batch) this.#batch.push(copy);
    else this.parkAll([copy]);
  }

  /**
   * Runs `work`, parking the copies it gives back all at once at the end: copies given back are
   * out of order, and parking them one by one into a full list would sort it once per copy.
   */
  batch(work: () => void): void {
    if (this.#batch) return work();
    const batch: Copy[] = this.#batch = [];
    try {
      work();
    } finally {
      this.#batch = null;
      if (batch.length > 0) this.parkAll(batch);
    }
  }

  /**
   * Puts copies in the waiting list; past `maxItemsInQueue`, the oldest are dropped (dead). Paged
   * messages are newer than every waiting copy and count towards the bound, so the copies in
   * memory go first; once they are gone, the paged ones come in and go the same way.
   */
  parkAll(copies: Iterable<Copy>): void {
    for (const copy of copies) {
      copy.state = CopyState.WAITING;
      if (copy.group === null) copy.message.refs++;
      this.waiting.add(copy);
    }
    if (this.queue.mirroring) return;
    const max = Math.max(0, this.queue.settings.maxItemsInQueue - this.queue.backlog.bounded);
    for (const oldest of this.waiting.overflow(max)) this.drop(oldest, "overflow");
  }

  /** Moves the ready copies of pools nobody in the group serves any more to the waiting list. */
  parkOrphans(group: Group): void {
    for (const [destination, pool] of group.pools) {
      if (group.covers(destination)) continue;
      for (let copy = pool.ready.shift(); copy; copy = pool.ready.shift()) this.park(copy);
      group.readyPools.delete(pool);
      group.pools.delete(destination);
    }
  }

  /** Drops the copies whose message arrived more than `ttl` ago. */
  expire(now: number): void {
    const ttl = this.queue.settings.ttl;
    if (ttl === null || this.queue.mirroring) return;
    for (const copy of this.waiting.expire(now - ttl * 1000)) this.drop(copy, "ttl");
  }

  /** Waiting copies per destination id. */
  countById(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const copy of this.waiting.ordered()) counts.set(copy.destination, (counts.get(copy.destination) ?? 0) + 1);
    return counts;
  }
}
