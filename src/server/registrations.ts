/**
 * The listen and consume registrations of one connection, by subscription number: what it reads,
 * the exclusive ids it claimed, and its acks and nacks. Read rules are checked and exclusive ids
 * claimed here, all or none, before a registration or an added id takes effect.
 */
import { checkChannelParts, KittenError, queueName } from "../protocol/mod.ts";
import type { Broker } from "./broker.ts";
import type { Peer } from "./peer.ts";
import { groupKeyOf, Handler, type HandlerKind } from "./queue/message.ts";
import type { Queue } from "./queue/queue.ts";
import { type Action, exclusiveTaken, notAllowed } from "./security/rules.ts";

interface Registration {
  handler: Handler;
  queue: Queue;
  /** Ids this registration owns through an exclusive (`!`) rule; given back when it goes. */
  claims: Set<string>;
}

/** Handlers are numbered in registration order, across connections: the earliest registrant is served first. */
let handlerSeq = 0;

/** Subscribes a new handler of `peer` to `queue`; its prefetch is capped by the channel's setting. */
export function subscribeHandler(
  queue: Queue,
  peer: Peer,
  kind: HandlerKind,
  sub: number,
  ids: readonly string[],
  prefetch: number | null,
): Handler {
  const limit = kind === "consume" ? queue.settings.prefetch : queue.settings.listenerPrefetch;
  const handler = new Handler(handlerSeq++, sub, kind, groupKeyOf(kind, peer.clientId), new Set(ids), Math.min(prefetch ?? limit, limit), peer);
  queue.subscribe(handler);
  return handler;
}

export class Registrations {
  readonly #bySub = new Map<number, Registration>();

  constructor(readonly broker: Broker, readonly peer: Peer) {}

  /**
   * Registers a listen or consume and returns the prefetch it is granted (the one asked, capped by
   * the channel's); a promise of it when its queue is being placed on a group (queue map): the
   * registration is made once that settles, or refused (NOT_OWNER).
   */
  subscribe(
    kind: HandlerKind,
    sub: number,
    endpoint: string,
    version: string,
    listed: readonly string[],
    prefetch: number | null,
  ): number | Promise<number> {
    const ids = [...new Set(listed)]; // an id listed twice is one registration (and one exclusive claim)
    checkChannelParts(endpoint, version, ids, kind === "listen" ? "Cannot listen to" : "Cannot consume");
    if (this.#bySub.has(sub)) {
      throw new KittenError("DUPLICATE_SUBSCRIPTION", `Cannot ${kind}: subscription ${sub} is already registered`);
    }
    // Read rules first: a client may not place queues it may not read.
    if (!this.broker.rules.isOpen) for (const id of ids) this.#checkRead(kind, endpoint, version, id);
    const placing = this.broker.placement.admit(queueName(endpoint, version));
    if (placing !== null) return placing.then(() => this.subscribe(kind, sub, endpoint, version, listed, prefetch));
    const claims = this.#authorizeRead(kind, endpoint, version, ids);
    const queue = this.broker.queue(queueName(endpoint, version));
    const handler = subscribeHandler(queue, this.peer, kind, sub, ids, prefetch);
    this.#bySub.set(sub, { handler, queue, claims });
    return handler.prefetch;
  }

  /** Adds ids to a registration (read rules checked, exclusive ids claimed) or removes some. */
  changeIds(sub: number, listed: readonly string[], add: boolean): void {
    const ids = [...new Set(listed)];
    const registration = this.#registration(sub, add ? "add ids" : "remove ids");
    const [endpoint, version] = registration.queue.name.split("/") as [string, string];
    checkChannelParts(endpoint, version, ids, add ? "Cannot add id to" : "Cannot remove id from");
    if (add) {
      const fresh = ids.filter((id) => !registration.handler.ids.has(id));
      for (const id of this.#authorizeRead("addId", endpoint, version, fresh)) registration.claims.add(id);
      registration.queue.addIds(registration.handler, ids);
    } else {
      registration.queue.removeIds(registration.handler, ids);
      this.#unclaim(registration, ids);
    }
  }

  unsubscribe(sub: number): void {
    const registration = this.#registration(sub, "unsubscribe");
    this.#bySub.delete(sub);
    registration.queue.unsubscribe(registration.handler);
    this.#unclaim(registration, [...registration.claims]);
  }

  /**
   * Registrations of queues another group owns now (a move switched them) end: their unacked
   * deliveries go back to the queue, which the broker drops. True when any ended.
   */
  forgetMoved(queues: readonly string[]): boolean {
    let ended = false;
    for (const [sub, registration] of this.#bySub) {
      if (!queues.includes(registration.queue.name) || !this.broker.placement.ownedElsewhere(registration.queue.name)) continue;
      this.unsubscribe(sub);
      ended = true;
    }
    return ended;
  }

  /** Acks name deliveries by tag; a tag no longer in flight (timed out, requeued) is ignored. */
  ack(sub: number, tags: readonly number[]): void {
    const registration = this.#bySub.get(sub);
    if (!registration) return;
    const { handler, queue } = registration;
    for (const tag of tags) {
      const copy = handler.inflight.get(tag);
      if (copy) queue.ack(copy);
    }
    this.broker.countAcked(tags.length);
  }

  nack(sub: number, tag: number, delaySeconds: number): void {
    const registration = this.#bySub.get(sub);
    const copy = registration?.handler.inflight.get(tag);
    if (!registration || !copy) return;
    this.broker.countAcked(1);
    registration.queue.nack(copy, delaySeconds);
  }

  /** Fills every handler's free prefetch slots. */
  pumpAll(): void {
    for (const { handler, queue } of this.#bySub.values()) queue.pump(handler);
  }

  /**
   * The connection is gone: every registration leaves (its unacked deliveries are requeued at
   * once) and its claims are given back. While the broker shuts down, copies stay as they are.
   */
  clear(): void {
    for (const registration of this.#bySub.values()) {
      if (!this.broker.shuttingDown) registration.queue.unsubscribe(registration.handler);
      this.#unclaim(registration, [...registration.claims]);
    }
    this.#bySub.clear();
  }

  /**
   * Checks read rules for every id, then claims the ids an exclusive (`!`) rule covers, all or
   * none. Returns the claimed ids; throws NOT_ALLOWED or EXCLUSIVE_TAKEN.
   */
  #authorizeRead(action: Action, endpoint: string, version: string, ids: readonly string[]): Set<string> {
    const claims = new Set<string>();
    if (this.broker.rules.isOpen) return claims;
    const { clientId, grants } = this.peer;
    const exclusive: string[] = [];
    let pattern = "";
    for (const id of ids) {
      this.#checkRead(action, endpoint, version, id);
      const marked = grants.exclusivePattern(endpoint, version, id);
      if (marked === null) continue;
      exclusive.push(id);
      pattern = marked;
    }
    if (exclusive.length === 0) return claims;
    const queue = queueName(endpoint, version);
    const refused = this.broker.exclusive.claimAll(queue, exclusive, clientId);
    if (refused !== null) {
      this.broker.log.warn("rules", `client=${clientId};queue=${queue};id=${refused};exclusive id already owned`);
      throw exclusiveTaken(clientId, action, `${queue}/${refused}`, pattern);
    }
    for (const id of exclusive) claims.add(id);
    return claims;
  }

  #checkRead(action: Action, endpoint: string, version: string, id: string): void {
    const { clientId, grants } = this.peer;
    if (!grants.canRead(endpoint, version, id)) throw notAllowed(clientId, action, `${endpoint}/${version}/${id}`);
  }

  #unclaim(registration: Registration, ids: Iterable<string>): void {
    for (const id of ids) {
      if (!registration.claims.delete(id)) continue;
      this.broker.exclusive.unclaim(this.peer.clientId, registration.queue.name, id);
    }
  }

  #registration(sub: number, action: string): Registration {
    const registration = this.#bySub.get(sub);
    if (!registration) {
      throw new KittenError("UNKNOWN_SUBSCRIPTION", `Cannot ${action}: subscription ${sub} is not registered`);
    }
    return registration;
  }
}
