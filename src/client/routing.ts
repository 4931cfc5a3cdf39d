/**
 * A client's copy of the queue map (brokers with `cluster.etcd`): which group owns each queue it
 * uses, at which map epoch, and each group's brokers. An owner is replaced only by a newer epoch
 * (a MAP_INFO, or the details of a NOT_OWNER refusal), so a late answer never undoes a move the
 * client already followed.
 */
import type { MapView } from "./map_requests.ts";

export interface QueueOwner {
  group: string;
  /** The map revision that placed or last moved the queue. */
  epoch: number;
}

/** What a broker that does not own a queue says (NOT_OWNER's details). */
export interface Redirect {
  queue: string;
  group: string;
  brokers: string[];
  epoch: number;
}

export class Routing {
  readonly #owners = new Map<string, QueueOwner>();
  readonly #brokers = new Map<string, string[]>();

  owner(queue: string): QueueOwner | undefined {
    return this.#owners.get(queue);
  }

  /** The brokers of `group` as `host:port@serviceId`, as the map last listed them. */
  brokers(group: string): string[] {
    return this.#brokers.get(group) ?? [];
  }

  /** Every queue the client knows the owner of (asked again after the link that tells of changes reopens). */
  queues(): string[] {
    return [...this.#owners.keys()];
  }

  /** Takes a MAP_INFO; returns the queues whose owning group changed. */
  learn(view: MapView): string[] {
    for (const [group, brokers] of Object.entries(view.groups ?? {})) if (brokers.length > 0) this.#brokers.set(group, brokers);
    const moved: string[] = [];
    for (const [queue, owner] of Object.entries(view.queues ?? {})) {
      const before = this.#owners.get(queue)?.group;
      if (this.#take(queue, owner) && before !== owner.group) moved.push(queue);
    }
    return moved;
  }

  /** Takes a NOT_OWNER's details: true when they are newer than what the client knew (the queue moved). */
  redirect(details: Redirect): boolean {
    if (details.brokers.length > 0) this.#brokers.set(details.group, details.brokers);
    return this.#take(details.queue, { group: details.group, epoch: details.epoch });
  }

  /** True when the client knows the owner a NOT_OWNER names already, at its epoch or a newer one. */
  agrees(details: Redirect): boolean {
    const known = this.#owners.get(details.queue);
    return known !== undefined && known.group === details.group && known.epoch >= details.epoch;
  }

  /** Keeps `owner` unless the client knows the queue at the same epoch or a newer one; true when kept. */
  #take(queue: string, owner: QueueOwner): boolean {
    const known = this.#owners.get(queue);
    if (known && known.epoch >= owner.epoch) return false;
    this.#owners.set(queue, { group: owner.group, epoch: owner.epoch });
    return true;
  }

  /** Drops what the client knew of `queue`: it is asked again. */
  forget(queue: string): void {
    this.#owners.delete(queue);
  }

  clear(): void {
    this.#owners.clear();
    this.#brokers.clear();
  }
}

/** The details of a NOT_OWNER refusal, when it has them (a send handed back before any link opened has none). */
export function redirectOf(details: unknown): Redirect | null {
  if (details === null || typeof details !== "object") return null;
  const { queue, group, brokers, epoch } = details as Partial<Redirect>;
  if (typeof queue !== "string" || typeof group !== "string" || typeof epoch !== "number" || !Array.isArray(brokers)) return null;
  return { queue, group, brokers: brokers.filter((broker) => typeof broker === "string"), epoch };
}
