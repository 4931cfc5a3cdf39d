/**
 * Message ids counted: the same id may be held more than once (a message copied to several
 * queues, a resend stored again), so an id is forgotten only when its last holder goes. Kept by
 * the store's checks by id (held_ids.ts, journal.ts), which a slave asks.
 */
export class IdCounts {
  readonly #counts = new Map<string, number>();

  has(id: string): boolean {
    return this.#counts.has(id);
  }

  add(id: string): void {
    this.#counts.set(id, (this.#counts.get(id) ?? 0) + 1);
  }

  /** One holder of `id` went. */
  delete(id: string): void {
    const count = this.#counts.get(id) ?? 1;
    if (count <= 1) this.#counts.delete(id);
    else this.#counts.set(id, count - 1);
  }

  clear(): void {
    this.#counts.clear();
  }
}
