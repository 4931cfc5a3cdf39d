/**
 * One queue (`endpoint/version`): its registrations, its messages and their copies.
 *
 * Routing of a message sent to id X: one copy for the consumers of X and of `*` together, and
 * one copy per listening clientId on X or `*`. A copy goes to a handler of its group with a free
 * prefetch slot, round-robin from the earliest registrant; otherwise it waits in its pool, FIFO.
 * A message nobody can receive waits in `waiting`, bounded by `maxItemsInQueue` and `ttl`, and
 * is handed out, in order, to the first recipient that registers for it.
 *
 * No I/O and no timers here: the broker calls `tick(now)` and injects the clock, so tests can
 * drive time.
 */
import { Groups } from "./groups.ts";
import { MinHeap } from "./heap.ts";
import { WaitingList } from "./waiting.ts";
import { Copy, CopyState, type Group, type Handler, type Message, type Pool } from "./message.ts";

export type { ChannelSettings as QueueSettings } from "./config.ts";
import type { ChannelSettings as QueueSettings } from "./config.ts";

export type DeadReason = "requeueLimit" | "overflow" | "ttl";

export interface QueueHooks {
  now(): number;
  /** A copy was handed to a handler (the store keeps the count across restarts). */
  onDelivered?(copy: Copy): void;
  /** A copy left the queue without being acknowledged (after counting it). */
  onDead(copy: Copy, reason: DeadReason): void;
  /** Every copy of a message is settled: the store may forget it. */
  onSettled(message: Message): void;
}

/** Counters exposed as statistics (`kitten_mq_queue_*`). */
export interface QueueCounters {
  received: number;
  delivered: number;
  acked: number;
  nacked: number;
  timeout: number;
  dropped: number;
  expired: number;
  dead: number;
}

let nextTag = 1;

export class Queue {
  readonly counters: QueueCounters = {
    received: 0, delivered: 0, acked: 0, nacked: 0, timeout: 0, dropped: 0, expired: 0, dead: 0,
  };
  /** Messages with at least one live copy. */
  live = 0;
  /**
   * Set on a slave: it keeps every message until the master's consumers ack it (or it is
   * promoted). It drops nothing on its own account (overflow, ttl): the master still serves it.
   */
  mirroring = false;
  readonly #groups = new Groups();
  /** Copies nobody can receive yet, oldest first. */
  readonly #waiting = new WaitingList();
  /** Copies to park when the current unsubscribe, removeIds or tick ends (null outside them). */
  #parkBatch: Copy[] | null = null;
  /**
   * Registered handlers. Ack timeouts scan each one's `inflight` map, which iterates in delivery
   * order, that is deadline order: no second per-delivery index to maintain on the hot path.
   */
  readonly #handlers = new Set<Handler>();
  readonly #delayed = new MinHeap<Copy>();
  #inflight = 0;

  constructor(readonly name: string, public settings: QueueSettings, readonly hooks: QueueHooks) {}

  // ── registrations ──────────────────────────────────────────────────────────────────────────

  /** Adds a handler, hands it the messages waiting for its ids, then fills its prefetch. */
  subscribe(handler: Handler): void {
    this.#handlers.add(handler);
    const group = this.#groups.of(handler);
    for (const id of handler.ids) this.#groups.index(group, handler, id);
    this.#flushWaiting(group, handler.ids);
    this.pump(handler);
  }

  addIds(handler: Handler, ids: readonly string[]): void {
    const group = this.#groups.of(handler);
    const added = ids.filter((id) => !handler.ids.has(id));
    for (const id of added) {
      handler.ids.add(id);
      this.#groups.index(group, handler, id);
    }
    this.#flushWaiting(group, new Set(added));
    this.pump(handler);
  }

  removeIds(handler: Handler, ids: readonly string[]): void {
    const group = this.#groups.get(handler.groupKey);
    if (!group) return;
    for (const id of ids) {
      if (!handler.ids.delete(id)) continue;
      this.#groups.unindex(group, handler, id);
    }
    this.#batchParks(() => this.#parkOrphans(group));
  }

  /**
   * Removes a handler (unsubscribe or disconnect). Its unacknowledged deliveries are requeued at
   * once: waiting for the ack timeout would delay them for nothing.
   */
  unsubscribe(handler: Handler): void {
    this.#handlers.delete(handler);
    const group = this.#groups.get(handler.groupKey);
    if (group) for (const id of handler.ids) this.#groups.unindex(group, handler, id);
    handler.ids.clear();
    this.#batchParks(() => {
      // Even when its group is gone (all its ids were removed): requeue falls back to the copy's group.
      for (const copy of [...handler.inflight.values()]) this.#release(copy, 0);
      if (group) this.#parkOrphans(group);
    });
    if (group) this.#groups.dropIfEmpty(group);
  }

  /** Gives a handler as many ready copies as its free prefetch slots allow. */
  pump(handler: Handler): void {
    const group = this.#groups.get(handler.groupKey);
    if (!group) return;
    while (handler.canTake()) {
      const pool = this.#oldestReadyFor(group, handler);
      if (!pool) return;
      const copy = pool.ready.shift()!;
      if (pool.ready.length === 0) group.readyPools.delete(pool);
      this.#dispatch(copy, pool, handler);
    }
  }

  // ── messages ───────────────────────────────────────────────────────────────────────────────

  /** Routes a new message (the broker has validated and, when durable, stored it). */
  publish(message: Message): void {
    this.live++;
    this.counters.received++;
    message.refs++; // held while routing, so the message cannot settle half-way
    try {
      if (!this.#route(message)) this.#park(new Copy(message, message.destination, null));
    } finally {
      this.#unref(message);
    }
  }

  ack(copy: Copy): void {
    const handler = copy.handler!;
    handler.inflight.delete(copy.tag);
    this.#inflight--;
    this.counters.acked++;
    this.#settle(copy);
    this.pump(handler);
  }

  /** Requeues now (`delaySeconds` 0) or after a delay; past `requeueLimit` the copy is dead. */
  nack(copy: Copy, delaySeconds: number): void {
    const handler = copy.handler!;
    this.counters.nacked++;
    this.#release(copy, delaySeconds);
    this.pump(handler);
  }

  /** Runs ack timeouts, due delayed requeues and ttl expiry. */
  tick(now: number): void {
    this.#batchParks(() => {
      this.#expireDeliveries(now);
      for (const copy of this.#delayed.popDue(now)) {
        if (copy.state === CopyState.DELAYED) this.#requeue(copy);
      }
      this.#expireWaiting(now);
    });
  }

  /** True when the queue holds timed work, so the broker's timer must keep visiting it. */
  get hasTimers(): boolean {
    return this.#inflight > 0 || this.#delayed.length > 0 ||
      (this.settings.ttl !== null && this.#waiting.size > 0);
  }

  depth(): { ready: number; inflight: number; delayed: number; waiting: number } {
    let ready = 0;
    for (const group of this.#groups.values()) for (const pool of group.readyPools) ready += pool.ready.length;
    let delayed = 0;
    for (const copy of this.#delayed) if (copy.state === CopyState.DELAYED) delayed++;
    return { ready, inflight: this.#inflight, delayed, waiting: this.#waiting.size };
  }

  /** Waiting copies per destination id. */
  waitingById(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const copy of this.#waiting.ordered()) counts.set(copy.destination, (counts.get(copy.destination) ?? 0) + 1);
    return counts;
  }

  // ── routing ────────────────────────────────────────────────────────────────────────────────

  /** Creates the copies of a message; false when nobody is registered to receive it. */
  #route(message: Message): boolean {
    const destinations = message.destination === "*" ? this.#broadcastDestinations() : [message.destination];
    let routed = false;
    for (const destination of destinations) {
      // The groups covering it: those on the id, then those on `*` (each group once).
      const own = this.#groups.on(destination);
      const star = destination === "*" ? undefined : this.#groups.on("*");
      if (own) for (const group of own) this.#copyTo(message, destination, group);
      if (star) for (const group of star) if (!own?.has(group)) this.#copyTo(message, destination, group);
      routed ||= own !== undefined || star !== undefined;
    }
    return routed;
  }

  #copyTo(message: Message, destination: string, group: Group): void {
    // Counted before it is handed out: a sink that acks inside deliver() must not settle
    // the message while its other copies are still being created.
    message.refs++;
    const copy = new Copy(message, destination, group);
    copy.deliveries = message.deliveries; // non-zero only for messages recovered at start
    message.copies?.push(copy);
    this.#enqueue(copy, this.#groups.pool(group, destination));
  }

  /** A broadcast goes to every id with a registration, as if sent to each; else to `*` itself. */
  #broadcastDestinations(): string[] {
    const ids = [...this.#groups.registeredIds()].filter((id) => id !== "*");
    return ids.length > 0 ? ids : ["*"];
  }

  /** Hands a copy to the next free handler of its pool (a group that covers it), or queues it behind the others (FIFO). */
  #enqueue(copy: Copy, pool: Pool): void {
    if (pool.ready.length === 0) {
      const handler = this.#nextHandler(pool);
      if (handler) return this.#dispatch(copy, pool, handler);
    }
    copy.state = CopyState.READY;
    pool.ready.push(copy);
    pool.group.readyPools.add(pool);
  }

  #dispatch(copy: Copy, pool: Pool, handler: Handler): void {
    copy.state = CopyState.INFLIGHT;
    copy.handler = handler;
    copy.deliveries++;
    copy.tag = nextTag++;
    copy.at = this.hooks.now() + this.settings.requeueInterval * 1000;
    handler.inflight.set(copy.tag, copy);
    pool.group.cursor = handler.seq;
    this.#inflight++;
    this.counters.delivered++;
    this.hooks.onDelivered?.(copy);
    handler.sink.deliver(copy, handler);
  }

  /**
   * Round-robin over the handlers on the pool's id and on `*`, merged by registration order:
   * the first free one after the last served, wrapping around.
   */
  #nextHandler(pool: Pool): Handler | null {
    const group = pool.group;
    const own = group.handlers.get(pool.destination);
    const star = pool.destination === "*" ? undefined : group.handlers.get("*");
    // The usual case, one handler on the id and none on `*`: no round-robin to compute.
    if (own?.length === 1 && star === undefined) return own[0]!.canTake() ? own[0]! : null;
    let after: Handler | null = null;
    let first: Handler | null = null;
    for (const list of [own, star]) {
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

  /** The pool, among those this handler may serve, whose next copy is the oldest. */
  #oldestReadyFor(group: Group, handler: Handler): Pool | null {
    if (group.readyPools.size === 0) return null;
    let best: Pool | null = null;
    let bestSeq = Infinity;
    if (handler.ids.has("*")) {
      for (const pool of group.readyPools) {
        const seq = pool.ready.peek()!.message.seq;
        if (seq < bestSeq) [best, bestSeq] = [pool, seq];
      }
      return best;
    }
    for (const id of handler.ids) {
      const head = group.pools.get(id)?.ready.peek();
      if (head && head.message.seq < bestSeq) [best, bestSeq] = [group.pools.get(id)!, head.message.seq];
    }
    return best;
  }

  // ── settling, requeue, expiry ──────────────────────────────────────────────────────────────

  /** Takes a copy back from its handler: requeued (now or later) or dead past the limit. */
  #release(copy: Copy, delaySeconds: number): void {
    copy.handler!.inflight.delete(copy.tag);
    copy.handler = null;
    this.#inflight--;
    if (copy.deliveries >= this.settings.requeueLimit) return this.#kill(copy, "requeueLimit");
    if (delaySeconds > 0) {
      copy.state = CopyState.DELAYED;
      copy.at = this.hooks.now() + delaySeconds * 1000;
      this.#delayed.push(copy);
      return;
    }
    this.#requeue(copy);
  }

  /** Redeliveries go to the back of their pool. */
  #requeue(copy: Copy): void {
    // The group may have been dropped and re-created (its handlers left and came back).
    const group = this.#groups.get(copy.group!.key) ?? copy.group!;
    copy.group = group;
    // Its handlers for this id may all have left meanwhile: it waits for the next one.
    if (!group.covers(copy.destination)) return this.#park(copy);
    this.#enqueue(copy, this.#groups.pool(group, copy.destination));
  }

  #expireDeliveries(now: number): void {
    for (const handler of this.#handlers) {
      if (handler.inflight.size === 0) continue;
      const due: Copy[] = [];
      for (const copy of handler.inflight.values()) {
        // After a reload that shortens requeueInterval, later deliveries may be due before this
        // one; they are then handled at most one old interval late, keeping this O(due).
        if (copy.at > now) break;
        due.push(copy);
      }
      if (due.length === 0) continue;
      for (const copy of due) {
        this.counters.timeout++;
        this.#release(copy, 0);
      }
      this.pump(handler);
    }
  }

  #expireWaiting(now: number): void {
    const ttl = this.settings.ttl;
    if (ttl === null || this.mirroring) return;
    for (const copy of this.#waiting.expire(now - ttl * 1000)) this.#kill(copy, "ttl");
  }

  /** Puts a copy in the waiting list; when full, the oldest waiting copy is dropped first. */
  #park(copy: Copy): void {
    if (this.#parkBatch) this.#parkBatch.push(copy);
    else this.#parkAll([copy]);
  }

  /**
   * Runs `work`, parking the copies it gives back all at once at the end: copies given back are
   * out of order, and parking them one by one into a full list would sort it once per copy.
   */
  #batchParks(work: () => void): void {
    if (this.#parkBatch) return work();
    const batch: Copy[] = this.#parkBatch = [];
    try {
      work();
    } finally {
      this.#parkBatch = null;
      if (batch.length > 0) this.#parkAll(batch);
    }
  }

  /** Puts copies in the waiting list; past `maxItemsInQueue`, the oldest are dropped (dead). */
  #parkAll(copies: Iterable<Copy>): void {
    for (const copy of copies) {
      copy.state = CopyState.WAITING;
      if (copy.group === null) copy.message.refs++;
      this.#waiting.add(copy);
    }
    if (this.mirroring) return;
    for (const oldest of this.#waiting.overflow(this.settings.maxItemsInQueue)) this.#kill(oldest, "overflow");
  }

  /**
   * A slave drops a copy that the master's recipient acked (the client mirrors acks to every
   * broker). The copy is found by its group and destination; a message still waiting for any
   * recipient here is settled too. Returns whether something was settled.
   */
  settleMirrored(message: Message, groupKey: string, destination: string): boolean {
    for (const copy of message.copies ?? []) {
      if (copy.destination !== destination || copy.group?.key !== groupKey) continue;
      if (copy.state === CopyState.READY) {
        const pool = copy.group.pools.get(destination);
        pool?.ready.delete(copy);
        if (pool && pool.ready.length === 0) copy.group.readyPools.delete(pool);
      } else if (copy.state === CopyState.WAITING) this.#waiting.delete(copy);
      else if (copy.state !== CopyState.DELAYED) continue; // in flight or settled: nothing to drop
      this.counters.acked++;
      this.#settle(copy);
      return true;
    }
    for (const copy of this.#waiting.ordered()) {
      if (copy.message !== message || copy.group !== null) continue;
      this.#waiting.delete(copy);
      this.counters.acked++;
      this.#settle(copy);
      return true;
    }
    return false;
  }

  /**
   * Puts back a message the store kept across a restart. It waits for a recipient like any other,
   * but outside the `maxItemsInQueue` bound: it was confirmed, and at start nobody has registered
   * yet, so counting it would drop confirmed messages before their consumers are back.
   */
  restore(message: Message): void {
    this.live++;
    this.counters.received++;
    const copy = new Copy(message, message.destination, null);
    copy.recovered = true;
    copy.deliveries = message.deliveries;
    this.#parkAll([copy]);
  }

  /** Moves the ready copies of pools nobody in the group serves any more to the waiting list. */
  #parkOrphans(group: Group): void {
    for (const [destination, pool] of group.pools) {
      if (group.covers(destination)) continue;
      for (let copy = pool.ready.shift(); copy; copy = pool.ready.shift()) this.#park(copy);
      group.readyPools.delete(pool);
      group.pools.delete(destination);
    }
  }

  /**
   * Hands waiting copies to a group that just gained `ids`, oldest first. Copies waiting for
   * anyone are routed afresh (every present group gets one); copies that belong to a group go
   * back to that group only.
   */
  #flushWaiting(group: Group, ids: Set<string>): void {
    if (this.#waiting.size === 0 || ids.size === 0) return;
    const all = ids.has("*");
    const due: Copy[] = [];
    for (const copy of this.#waiting.ordered()) {
      // Groups are compared by key: a group is re-created when its handlers come back.
      const isDue = copy.group === null
        ? all || copy.destination === "*" || ids.has(copy.destination)
        : copy.group.key === group.key && (all || ids.has(copy.destination));
      if (isDue) due.push(copy);
    }
    for (const copy of due) {
      this.#waiting.delete(copy);
      if (copy.group !== null) {
        copy.group = group;
        this.#enqueue(copy, this.#groups.pool(group, copy.destination));
        continue;
      }
      if (!this.#route(copy.message)) {
        this.#waiting.add(copy);
        continue;
      }
      copy.state = CopyState.SETTLED;
      this.#unref(copy.message);
    }
  }

  /** Keeps a message from settling (its store row stays) until `release()`. */
  hold(message: Message): void {
    message.refs++;
  }

  release(message: Message): void {
    this.#unref(message);
  }

  #kill(copy: Copy, reason: DeadReason): void {
    if (reason === "overflow") this.counters.dropped++;
    else if (reason === "ttl") this.counters.expired++;
    else this.counters.dead++;
    this.hooks.onDead(copy, reason);
    this.#settle(copy);
  }

  #settle(copy: Copy): void {
    copy.state = CopyState.SETTLED;
    this.#unref(copy.message);
  }

  #unref(message: Message): void {
    if (--message.refs > 0) return;
    this.live--;
    this.hooks.onSettled(message);
  }

  // ── inspection and purge (admin API) ───────────────────────────────────────────────────────

  /** The registered handlers, earliest registrant first (queue_view.ts builds snapshots of them). */
  handlers(): Handler[] {
    return [...this.#handlers].sort((a, b) => a.seq - b.seq);
  }

  /**
   * Removes the ready, delayed and waiting copies (of one destination id, or all) and returns
   * how many. In-flight deliveries stay: their consumer is working on them and will ack. Each
   * removed copy is settled, so `live` and the store stay right.
   */
  purge(destination?: string): number {
    const matches = (copy: Copy) => destination === undefined || copy.destination === destination;
    const removed: Copy[] = [];
    for (const group of this.#groups.values()) {
      for (const pool of group.pools.values()) {
        if (destination !== undefined && pool.destination !== destination) continue;
        removed.push(...pool.ready.removeWhere(matches));
        if (pool.ready.length === 0) group.readyPools.delete(pool);
      }
    }
    // Delayed copies stay in the heap, marked settled: popDue() skips copies no longer DELAYED.
    for (const copy of this.#delayed) if (copy.state === CopyState.DELAYED && matches(copy)) removed.push(copy);
    for (const copy of this.#waiting.ordered()) {
      if (!matches(copy)) continue;
      this.#waiting.delete(copy);
      removed.push(copy);
    }
    for (const copy of removed) this.#settle(copy);
    return removed.length;
  }

  /**
   * Every copy not yet settled, in this order: ready (per group, per id), in flight (per handler,
   * in delivery order), delayed (due first), waiting (oldest first). Lazy: a page of it costs
   * O(offset + limit) plus the delayed ones.
   */
  *liveCopies(): Generator<Copy> {
    for (const group of this.#groups.values()) for (const pool of group.pools.values()) yield* pool.ready;
    for (const handler of [...this.#handlers].sort((a, b) => a.seq - b.seq)) yield* handler.inflight.values();
    yield* [...this.#delayed].filter((copy) => copy.state === CopyState.DELAYED).sort((a, b) => a.at - b.at);
    yield* this.#waiting.ordered();
  }
}
