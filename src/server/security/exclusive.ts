/**
 * Owners of exclusive (`!`) ids: the first client to register an id under an exclusive read
 * grant owns it; other clients are refused until the owner's registrations are gone.
 *
 * The owner is the client id, not the connection: several processes sharing one client id share
 * its ids, and a reconnecting owner takes its ids back. Claims are counted: claim once per
 * registration of an id, release once per registration removed (unsubscribe, removeId,
 * connection closed); at zero the id is free, so an exclusive listener that reconnects gets its
 * own id back.
 *
 * The `*` id (a registration on every id of the queue) overlaps every id: it can be claimed only
 * when no other owner holds an id of the queue, and while someone holds it nobody else can claim
 * any id of that queue.
 */

interface QueueClaims {
  /** id → owner and the number of its registrations on that id. */
  ids: Map<string, { owner: string; count: number }>;
  /** owner → how many distinct ids of this queue it holds (for `*` checks). */
  owners: Map<string, number>;
}

export class ExclusiveOwners {
  readonly #queues = new Map<string, QueueClaims>();
  /** owner → queues where it holds ids, for releaseAll(). */
  readonly #byOwner = new Map<string, Set<string>>();

  /** Claims `id` of `queue` (`endpoint/version`) for `owner`: false when another owner holds it. */
  claim(queue: string, id: string, owner: string): boolean {
    let claims = this.#queues.get(queue);
    if (claims !== undefined && this.#blocker(claims, id, owner) !== undefined) return false;
    if (claims === undefined) this.#queues.set(queue, claims = { ids: new Map(), owners: new Map() });
    const held = claims.ids.get(id);
    if (held !== undefined) {
      held.count++;
      return true;
    }
    claims.ids.set(id, { owner, count: 1 });
    claims.owners.set(owner, (claims.owners.get(owner) ?? 0) + 1);
    let queues = this.#byOwner.get(owner);
    if (queues === undefined) this.#byOwner.set(owner, queues = new Set());
    queues.add(queue);
    return true;
  }

  /**
   * Claims every id or none: the id that another owner holds, or null when all are claimed now.
   * For registrations on several ids at once (a refused id must not leave the others claimed).
   */
  claimAll(queue: string, listed: readonly string[], owner: string): string | null {
    const ids = [...new Set(listed)]; // one claim per id, however often it is listed
    const claims = this.#queues.get(queue);
    if (claims !== undefined) {
      const refused = ids.find((id) => this.#blocker(claims, id, owner) !== undefined);
      if (refused !== undefined) return refused;
    }
    for (const id of ids) this.claim(queue, id, owner);
    return null;
  }

  /** Releases one registration of `owner` on `id`; the id is free when its count reaches zero. */
  unclaim(owner: string, queue: string, id: string): void {
    const claims = this.#queues.get(queue);
    const held = claims?.ids.get(id);
    if (claims === undefined || held === undefined || held.owner !== owner) return;
    if (--held.count > 0) return;
    claims.ids.delete(id);
    const remaining = claims.owners.get(owner)! - 1;
    if (remaining > 0) {
      claims.owners.set(owner, remaining);
      return;
    }
    claims.owners.delete(owner);
    this.#byOwner.get(owner)?.delete(queue);
    if (this.#byOwner.get(owner)?.size === 0) this.#byOwner.delete(owner);
    if (claims.ids.size === 0) this.#queues.delete(queue);
  }

  /** Releases every id `owner` holds: call when the last connection of that client id is gone. */
  releaseAll(owner: string): void {
    for (const queue of this.#byOwner.get(owner) ?? []) {
      const claims = this.#queues.get(queue)!;
      for (const [id, held] of claims.ids) if (held.owner === owner) claims.ids.delete(id);
      claims.owners.delete(owner);
      if (claims.ids.size === 0) this.#queues.delete(queue);
    }
    this.#byOwner.delete(owner);
  }

  /** Who keeps `owner` from claiming `id` (for logs), or undefined when `owner` may claim it. */
  ownerOf(queue: string, id: string, owner = ""): string | undefined {
    const claims = this.#queues.get(queue);
    return claims === undefined ? undefined : this.#blocker(claims, id, owner);
  }

  /** How many ids are held in all (for stats and tests). */
  get size(): number {
    let total = 0;
    for (const claims of this.#queues.values()) total += claims.ids.size;
    return total;
  }

  #blocker(claims: QueueClaims, id: string, owner: string): string | undefined {
    const held = claims.ids.get(id)?.owner;
    if (held !== undefined && held !== owner) return held;
    const all = claims.ids.get("*")?.owner;
    if (all !== undefined && all !== owner) return all;
    if (id === "*") {
      for (const other of claims.owners.keys()) if (other !== owner) return other;
    }
    return undefined;
  }
}
