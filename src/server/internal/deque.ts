/**
 * A FIFO on a growable ring buffer: push, shift and peek in O(1). `Array.prototype.shift` is
 * O(n) on large arrays, and a backlog of a million messages must not make every delivery slow.
 */
export class Deque<T> {
  #items: (T | undefined)[];
  #head = 0;
  #length = 0;

  constructor(capacity = 16) {
    // At least one slot: with none, `#grow` would double 0 and every index would be NaN.
    this.#items = new Array(Math.max(1, Math.floor(capacity)));
  }

  get length(): number {
    return this.#length;
  }

  push(item: T): void {
    if (this.#length === this.#items.length) this.#grow();
    this.#items[(this.#head + this.#length) % this.#items.length] = item;
    this.#length++;
  }

  shift(): T | undefined {
    if (this.#length === 0) return undefined;
    const item = this.#items[this.#head];
    this.#items[this.#head] = undefined; // let the item be collected
    this.#head = (this.#head + 1) % this.#items.length;
    this.#length--;
    return item;
  }

  peek(): T | undefined {
    return this.#length === 0 ? undefined : this.#items[this.#head];
  }

  /** The item `i` places from the oldest (undefined out of range). */
  at(i: number): T | undefined {
    return i < 0 || i >= this.#length ? undefined : this.#items[(this.#head + i) % this.#items.length];
  }

  /** The newest item (undefined when empty). */
  last(): T | undefined {
    return this.#length === 0 ? undefined : this.#items[(this.#head + this.#length - 1) % this.#items.length];
  }

  /** Removes and returns the newest item. */
  pop(): T | undefined {
    if (this.#length === 0) return undefined;
    const at = (this.#head + this.#length - 1) % this.#items.length;
    const item = this.#items[at];
    this.#items[at] = undefined;
    this.#length--;
    return item;
  }

  /**
   * Removes one item, keeping the order of the others. O(its distance from the head): meant for
   * items near the head (a slave drops messages in about the order the master acks them).
   */
  delete(item: T): boolean {
    const capacity = this.#items.length;
    let at = -1;
    for (let i = 0; i < this.#length; i++) {
      if (this.#items[(this.#head + i) % capacity] === item) {
        at = i;
        break;
      }
    }
    if (at < 0) return false;
    for (let i = at; i > 0; i--) this.#items[(this.#head + i) % capacity] = this.#items[(this.#head + i - 1) % capacity];
    this.#items[this.#head] = undefined;
    this.#head = (this.#head + 1) % capacity;
    this.#length--;
    return true;
  }

  /** Removes every item for which `drop` returns true, keeping the order of the others. */
  removeWhere(drop: (item: T) => boolean): T[] {
    const removed: T[] = [];
    const kept: T[] = [];
    for (const item of this) (drop(item) ? removed : kept).push(item);
    if (removed.length > 0) {
      this.clear();
      for (const item of kept) this.push(item);
    }
    return removed;
  }

  clear(): void {
    this.#items = new Array(16);
    this.#head = 0;
    this.#length = 0;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (let i = 0; i < this.#length; i++) yield this.#items[(this.#head + i) % this.#items.length] as T;
  }

  #grow(): void {
    const next = new Array<T | undefined>(this.#items.length * 2);
    for (let i = 0; i < this.#length; i++) next[i] = this.#items[(this.#head + i) % this.#items.length];
    this.#items = next;
    this.#head = 0;
  }
}
