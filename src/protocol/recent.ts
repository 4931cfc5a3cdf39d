/**
 * A map that keeps only its `capacity` most recently added entries, oldest evicted first.
 *
 * Eviction order lives in a ring of keys. The obvious `map.delete(map.keys().next().value)` is
 * O(holes) in JavaScriptCore once many entries were deleted from the front (measured: more than
 * half of a client's CPU), so this never iterates the map to find the oldest entry.
 */
export class RecentMap<K, V> {
  readonly #map = new Map<K, V>();
  readonly #ring: (K | undefined)[];
  #head = 0;
  #count = 0;

  constructor(readonly capacity: number) {
    this.#ring = new Array(capacity);
  }

  get size(): number {
    return this.#map.size;
  }

  has(key: K): boolean {
    return this.#map.has(key);
  }

  get(key: K): V | undefined {
    return this.#map.get(key);
  }

  /** Adds or replaces an entry; a new key evicts the oldest one when full. */
  set(key: K, value: V): void {
    if (this.#map.has(key)) {
      this.#map.set(key, value);
      return;
    }
    if (this.#count === this.capacity) {
      this.#map.delete(this.#ring[this.#head] as K);
      this.#ring[this.#head] = key;
      this.#head = (this.#head + 1) % this.capacity;
    } else {
      this.#ring[(this.#head + this.#count) % this.capacity] = key;
      this.#count++;
    }
    this.#map.set(key, value);
  }

  /** Forgets a key (its ring slot is skipped when reached). */
  delete(key: K): boolean {
    return this.#map.delete(key);
  }

  clear(): void {
    this.#map.clear();
    this.#ring.fill(undefined);
    this.#head = 0;
    this.#count = 0;
  }

  /** Entries oldest first. */
  *entries(): IterableIterator<[K, V]> {
    for (let i = 0; i < this.#count; i++) {
      const key = this.#ring[(this.#head + i) % this.capacity] as K;
      if (this.#map.has(key)) yield [key, this.#map.get(key)!];
    }
  }

  *keys(): IterableIterator<K> {
    for (const [key] of this.entries()) yield key;
  }
}
