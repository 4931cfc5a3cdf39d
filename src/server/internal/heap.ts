/**
 * A binary min-heap ordered by `at` (a time in ms). Holds delayed requeues: each nack chooses its
 * own delay, so unlike ack timeouts they are not in time order.
 */
export interface Timed {
  at: number;
}

export class MinHeap<T extends Timed> {
  #items: T[] = [];

  get length(): number {
    return this.#items.length;
  }

  peek(): T | undefined {
    return this.#items[0];
  }

  push(item: T): void {
    const items = this.#items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (items[parent]!.at <= item.at) break;
      items[i] = items[parent]!;
      i = parent;
    }
    items[i] = item;
  }

  pop(): T | undefined {
    const items = this.#items;
    const top = items[0];
    const last = items.pop();
    if (items.length === 0 || last === undefined) return top;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= items.length) break;
      const right = left + 1;
      const child = right < items.length && items[right]!.at < items[left]!.at ? right : left;
      if (items[child]!.at >= last.at) break;
      items[i] = items[child]!;
      i = child;
    }
    items[i] = last;
    return top;
  }

  /** Removes and returns every item due at or before `now`, earliest first. */
  popDue(now: number): T[] {
    const due: T[] = [];
    while (this.#items.length > 0 && this.#items[0]!.at <= now) due.push(this.pop()!);
    return due;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    yield* this.#items;
  }
}
