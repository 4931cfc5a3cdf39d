/**
 * When the durable store's next commit runs (sqlite_store.ts): on the next event-loop turn
 * (`soon`: appends, whose senders wait for it), or within a delay (`within`: removes, delivery
 * counts, delays and retries, which nobody waits for). `within` is called for every remove and
 * delivery, so it costs one comparison when a commit is due no later already.
 */
export class CommitTimer {
  #immediate: ReturnType<typeof setImmediate> | null = null;
  #timer: ReturnType<typeof setTimeout> | null = null;
  /** When `#timer` fires (performance.now() ms). */
  #due = 0;
  /** The delay `#timer` was set with. */
  #delay = 0;

  constructor(readonly commit: () => void) {}

  /** The commit runs on the next turn. */
  soon(): void {
    if (this.#immediate === null) this.#immediate = setImmediate(this.commit);
  }

  /** The commit runs within `delay` ms: sooner if it was due sooner already. */
  within(delay: number): void {
    if (this.#immediate !== null) return;
    // A timer set with no longer a delay is due sooner.
    if (this.#timer !== null && delay >= this.#delay) return;
    const due = performance.now() + delay;
    if (this.#timer !== null) {
      if (due >= this.#due) return;
      clearTimeout(this.#timer); // a remove must not wait for a delivery count's longer delay
    }
    this.#due = due;
    this.#delay = delay;
    this.#timer = setTimeout(this.commit, delay);
  }

  /** The commit runs now (or never: the store closes): nothing stays scheduled. */
  clear(): void {
    if (this.#immediate !== null) clearImmediate(this.#immediate);
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#immediate = null;
    this.#timer = null;
  }
}
