/**
 * Who takes what in one queue. A queue has one group for all its consumers and one per listening
 * clientId; each group has a pool of ready copies per destination id, and the handlers registered
 * for each id in registration order (round-robin starts from the earliest registrant). Across
 * groups it indexes which groups listen on each id: routing a message visits only those, and a
 * broadcast goes to every id someone registered.
 */
import { Deque } from "./deque.ts";
import { Group, type Handler, Pool } from "./message.ts";

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
