/**
 * Who takes what in one queue. A queue has one group for all its consumers and one per listening
 * clientId; each group has a pool of ready copies per destination id, and the handlers registered
 * for each id in registration order (round-robin starts from the earliest registrant). Across
 * groups it indexes which groups listen on each id: routing a message visits only those, and a
 * broadcast goes to every id someone registered. `nextHandler` and `oldestReadyFor` choose, within
 * a group, who takes the next copy and which copy a freed handler takes.
 */
import { Deque } from "../internal/deque.ts";
import { type Copy, Group, type Handler, Pool } from "./message.ts";

export class Groups {
  readonly #groups = new Map<string, Group>();
  /** The groups with a handler on each id (`*` included): routing visits these, not every group. */
  readonly #byId = new Map<string, Set<Group>>();

  get(key: string): Group | undefined {
    return this.#groups.get(key);
  }

  values(): IterableIterator<Group> {
    return this.#groups.values();
  }

  /** The group a handler belongs to, created on first use. */
  of(handler: Handler): Group {
    let group = this.#groups.get(handler.groupKey);
    if (!group) {
      group = new Group(handler.groupKey, handler.kind);
      this.#groups.set(handler.groupKey, group);
    }
    return group;
  }

  /** Forgets a group that has neither handlers nor pools left. */
  dropIfEmpty(group: Group): void {
    if (group.handlers.size === 0 && group.pools.size === 0) this.#groups.delete(group.key);
  }

  /** The pool of ready copies of `destination` in `group`, created on first use. */
  pool(group: Group, destination: string): Pool {
    let pool = group.pools.get(destination);
    if (!pool) {
      pool = new Pool(group, destination, new Deque());
      group.pools.set(destination, pool);
    }
    return pool;
  }

  /** Ids with at least one handler, in any group (`*` included). */
  registeredIds(): IterableIterator<string> {
    return this.#byId.keys();
  }

  /** The groups with a handler on `id` (only on that id: a group on `*` is under "*"). */
  on(id: string): ReadonlySet<Group> | undefined {
    return this.#byId.get(id);
  }

  /** Registers `handler` for `id` in `group` (once), keeping registration order. */
  index(group: Group, handler: Handler, id: string): void {
    const list = group.handlers.get(id);
    if (list) {
      if (list.includes(handler)) return;
      list.push(handler);
      list.sort((a, b) => a.seq - b.seq);
    } else {
      group.handlers.set(id, [handler]);
      const groups = this.#byId.get(id);
      if (groups) groups.add(group);
      else this.#byId.set(id, new Set([group]));
    }
  }

  unindex(group: Group, handler: Handler, id: string): void {
    const list = group.handlers.get(id);
    const at = list ? list.indexOf(handler) : -1;
    if (!list || at < 0) return;
    list.splice(at, 1);
    if (list.length > 0) return;
    group.handlers.delete(id);
    const groups = this.#byId.get(id)!;
    groups.delete(group);
    if (groups.size === 0) this.#byId.delete(id);
  }
}

// ── choosing ───────────────────────────────────────────────────────────────────────────────────

/**
 * Round-robin over the handlers on the pool's id and on `*`, merged by registration order:
 * the first free one after the last served, wrapping around.
 */
export function nextHandler(pool: Pool): Handler | null {
  const group = pool.group;
  const own = group.handlers.get(pool.destination);
  const star = pool.destination === "*" ? undefined : group.handlers.get("*");
  // The usual case, one handler on the id and none on `*`: no round-robin to compute.
  if (own?.length === 1 && star === undefined) return own[0]!.canTake() ? own[0]! : null;
  let after: Handler | null = null; // the earliest free registrant after the cursor
  let first: Handler | null = null; // the earliest free one overall: the wrap-around
  for (let pass = 0; pass < 2; pass++) {
    const list = pass === 0 ? own : star;
    if (!list) continue;
    for (const handler of list) {
      if (!handler.canTake()) continue;
      if (handler.seq > group.cursor) {
        if (!after || handler.seq < after.seq) after = handler;
      } else if (!first || handler.seq < first.seq) first = handler;
    }
  }
  return after ?? first;
}

/** Takes a ready copy out of its pool (the pool leaves its group's ready set once empty). */
export function takeOutOfPool(copy: Copy): void {
  const pool = copy.group?.pools.get(copy.destination);
  if (!pool) return;
  pool.ready.delete(copy);
  if (pool.ready.length === 0) pool.group.readyPools.delete(pool);
}

/** The pool, among those this handler may serve, whose next copy is the oldest. */
export function oldestReadyFor(group: Group, handler: Handler): Pool | null {
  if (group.readyPools.size === 0) return null;
  let best: Pool | null = null;
  let bestSeq = Infinity;
  if (handler.ids.has("*")) {
    for (const pool of group.readyPools) {
      const seq = pool.ready.peek()!.message.seq;
      if (seq < bestSeq) {
        best = pool;
        bestSeq = seq;
      }
    }
    return best;
  }
  for (const id of handler.ids) {
    const pool = group.pools.get(id);
    const seq = pool?.ready.peek()?.message.seq;
    if (seq !== undefined && seq < bestSeq) {
      best = pool!;
      bestSeq = seq;
    }
  }
  return best;
}
