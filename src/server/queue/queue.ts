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
import { Backlog, residentCost } from "./backlog.ts";
import { newQueueCounters, type QueueCounters } from "./counters.ts";
import { Deliveries } from "./deliveries.ts";
import { Groups, nextHandler, oldestReadyFor } from "./groups.ts";
import { Parking } from "./waiting.ts";
import { MirroredCopies } from "./mirrored_copies.ts";
import { Copy, CopyState, type DeadLetterInfo, type Group, type Handler, type Message, type Pool } from "./message.ts";

export type { ChannelSettings as QueueSettings } from "../config/config.ts";
import type { ChannelSettings as QueueSettings } from "../config/config.ts";

export type DeadReason = DeadLetterInfo["reason"];

export interface QueueHooks {
  now(): number;
  /** A copy was handed to a handler (the store keeps the count across restarts). */
  onDelivered?(copy: Copy): void;
  /**
   * A copy came back from its handler (nacked, its ack deadline passed, or its handler left) and
   * is requeued: at once (`at` 0), or once due at `at` (ms; the store keeps it across restarts).
   */
  onTakenBack?(copy: Copy, at: number): void;
  /** A copy left the queue without being acknowledged (after counting it). */
  onDead(copy: Copy, reason: DeadReason): void;
  /** Every copy of a message is settled: the store may forget it. */
  onSettled(message: Message): void;
  /** A handler could take more and nothing is ready in memory, while messages are paged. */
  onStarving?(): void;
}

export class Queue {
  readonly counters: QueueCounters = newQueueCounters();
  /** Messages with at least one live copy. */
  live = 0;

  /** Messages the queue holds: in memory, and paged to the store (what `maxMessagesPerQueue` bounds). */
  get held(): number {
    return this.live + this.backlog.count;
  }
  /**
   * Set on a slave: it keeps every message until the master's consumers ack it (or it is
   * promoted). It drops nothing on its own account (overflow, ttl): the master still serves it.
   */
  mirroring = false;
  /** Memory used and messages left in the store (durable queues beyond their budget). */
  readonly backlog = new Backlog();
  readonly #groups = new Groups();
  readonly #deliveries = new Deliveries();
  readonly #parking = new Parking(this, (copy, reason) => this.#kill(copy, reason));
  /** On a slave: what the master's consumers do to their copies, done to the copies held here. */
  readonly mirrored = new MirroredCopies(this.#deliveries, this.#parking, this.counters, (copy) => this.#settle(copy));

  constructor(readonly name: string, public settings: QueueSettings, readonly hooks: QueueHooks) {}

  // ── registrations ──────────────────────────────────────────────────────────────────────────

  /** Adds a handler, hands it the messages waiting for its ids, then fills its prefetch. */
  subscribe(handler: Handler): void {
    this.#deliveries.add(handler);
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
    this.#parking.batch(() => this.#parking.parkOrphans(group));
  }

  /**
   * Removes a handler (unsubscribe or disconnect). Its unacknowledged deliveries are requeued at
   * once: waiting for the ack timeout would delay them for nothing.
   */
  unsubscribe(handler: Handler): void {
    this.#deliveries.delete(handler);
    const group = this.#groups.get(handler.groupKey);
    if (group) for (const id of handler.ids) this.#groups.unindex(group, handler, id);
    handler.ids.clear();
    this.#parking.batch(() => {
      // Even when its group is gone (all its ids were removed): requeue falls back to the copy's group.
      for (const copy of [...handler.inflight.values()]) this.#takeBack(copy, 0);
      if (group) this.#parking.parkOrphans(group);
    });
    if (group) this.#groups.dropIfEmpty(group);
  }

  /** Gives a handler as many ready copies as its free prefetch slots allow. */
  pump(handler: Handler): void {
    const group = this.#groups.get(handler.groupKey);
    if (!group) return;
    while (handler.canTake()) {
      const pool = oldestReadyFor(group, handler);
      if (!pool) {
        // Nothing ready in memory for a handler that could take more: paged messages are needed.
        if (this.backlog.count > 0) this.hooks.onStarving?.();
        return;
      }
      const copy = pool.ready.shift()!;
      if (pool.ready.length === 0) group.readyPools.delete(pool);
      this.#dispatch(copy, pool, handler);
    }
  }

  // ── messages ───────────────────────────────────────────────────────────────────────────────

  /** Routes a new message (the broker has validated and, when durable, stored it). */
  publish(message: Message): void {
    this.counters.received++;
    this.admit(message, false);
  }

  /**
   * Routes a message read back from the store (paged, counted as received when it arrived) as if
   * it arrived now. A `recovered` one (stored before this start) waits outside the waiting bound.
   */
  admit(message: Message, recovered: boolean): void {
    this.live++;
    this.backlog.resident += residentCost(message);
    message.refs++; // held while routing, so the message cannot settle half-way
    try {
      if (this.#expired(message)) {
        // Paged past its ttl: it waited, on disk, as long as a waiting message may.
        message.refs++;
        this.#kill(this.#storedCopy(message, recovered), "ttl");
      } else if (!this.#route(message)) {
        this.#parkUnrouted(this.#storedCopy(message, recovered));
      }
    } finally {
      this.#unref(message);
    }
  }

  /** True for a message read back from the store after its ttl (a slave drops nothing on its own). */
  #expired(message: Message): boolean {
    const ttl = this.settings.ttl;
    return ttl !== null && !this.mirroring && message.created <= this.hooks.now() - ttl * 1000;
  }

  /** Copies the counts the memory budget needs into `backlog` (see Backlog.waitingBytes). */
  syncBacklog(): void {
    this.backlog.inflight = this.#deliveries.inflight;
    this.backlog.live = this.live;
  }

  /**
   * The messages in memory of a queue nobody is registered to receive from, when that is all it
   * holds: each message's only copy waits (none ready, in flight or delayed), never delivered,
   * not recovered. Oldest first; null for any other queue. `release()` lets them go.
   */
  idleMessages(): Message[] | null {
    const waiting = this.#parking.waiting;
    if (this.mirroring || this.#deliveries.handlers.size > 0 || waiting.size === 0 || waiting.size !== this.live) return null;
    const messages: Message[] = [];
    for (const copy of waiting.ordered()) {
      if (copy.group !== null || copy.deliveries > 0 || copy.recovered || copy.message.refs !== 1) return null;
      messages.push(copy.message);
    }
    return messages;
  }

  /**
   * Takes every waiting copy out of memory without settling its message: the messages
   * `idleMessages()` returned stay stored, and the pager counts them as paged. Returns how many.
   */
  release(): number {
    const copies = [...this.#parking.waiting.ordered()];
    for (const copy of copies) {
      this.#parking.waiting.delete(copy);
      copy.state = CopyState.SETTLED;
      copy.message.refs = 0;
      this.backlog.resident -= residentCost(copy.message);
    }
    this.live -= copies.length;
    return copies.length;
  }

  /** Drops the oldest waiting copies over `maxItemsInQueue` (paged messages count towards it). */
  trimWaiting(): void {
    this.#parking.parkAll([]);
  }

  ack(copy: Copy): void {
    const handler = copy.handler!;
    this.#deliveries.end(copy);
    this.counters.acked++;
    this.#settle(copy);
    this.pump(handler);
  }

  /** Requeues now (`delaySeconds` 0) or after a delay; past `requeueLimit` the copy is dead. */
  nack(copy: Copy, delaySeconds: number): void {
    const handler = copy.handler!;
    this.counters.nacked++;
    this.#takeBack(copy, delaySeconds);
    this.pump(handler);
  }

  /** Runs ack timeouts, due delayed requeues and ttl expiry. */
  tick(now: number): void {
    this.#parking.batch(() => {
      this.#expireDeliveries(now);
      for (const copy of this.#deliveries.popDue(now)) {
        if (copy.state === CopyState.DELAYED) this.#requeue(copy);
      }
      this.#parking.expire(now);
    });
  }

  /** True when the queue holds timed work, so the broker's timer must keep visiting it. */
  get hasTimers(): boolean {
    return this.#deliveries.hasTimers || (this.settings.ttl !== null && this.#parking.waiting.size > 0);
  }

  /** The copies waiting out a delayed requeue (nacked with a delay), in no order. */
  delayedCopies(): Iterable<Copy> {
    return this.#deliveries.delayed();
  }

  /** Copies in memory by state (messages paged to the store: `backlog.count`). */
  depth(): { ready: number; inflight: number; delayed: number; waiting: number } {
    let ready = 0;
    for (const group of this.#groups.values()) for (const pool of group.readyPools) ready += pool.ready.length;
    let delayed = 0;
    for (const _ of this.#deliveries.delayed()) delayed++;
    return { ready, inflight: this.#deliveries.inflight, delayed, waiting: this.#parking.waiting.size };
  }

  /** Waiting copies per destination id. */
  waitingById(): Map<string, number> {
    return this.#parking.countById();
  }

  // ── routing ────────────────────────────────────────────────────────────────────────────────

  /** Creates the copies of a message; false when nobody is registered to receive it. */
  #route(message: Message): boolean {
    if (message.destination !== "*") return this.#routeTo(message, message.destination);
    let routed = false;
    for (const destination of this.#broadcastDestinations()) routed = this.#routeTo(message, destination) || routed;
    return routed;
  }

  /** Copies for the groups covering `destination`: those on the id, then those on `*` (each once). */
  #routeTo(message: Message, destination: string): boolean {
    const own = this.#groups.on(destination);
    const star = destination === "*" ? undefined : this.#groups.on("*");
    if (own) for (const group of own) this.#copyTo(message, destination, group);
    if (star) for (const group of star) if (!own?.has(group)) this.#copyTo(message, destination, group);
    return own !== undefined || star !== undefined;
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
    // A delayed requeue that moved here with its queue keeps its delay (move/outgoing.ts).
    const notBefore = copy.message.notBefore;
    if (notBefore > 0 && notBefore > this.hooks.now()) return this.#deliveries.delay(copy, notBefore);
    if (pool.ready.length === 0) {
      const handler = nextHandler(pool);
      if (handler) return this.#dispatch(copy, pool, handler);
    }
    copy.state = CopyState.READY;
    pool.ready.push(copy);
    pool.group.readyPools.add(pool);
  }

  #dispatch(copy: Copy, pool: Pool, handler: Handler): void {
    this.#deliveries.start(copy, pool, handler, this.hooks.now() + this.settings.requeueInterval * 1000);
    this.counters.delivered++;
    this.hooks.onDelivered?.(copy);
    handler.sink.deliver(copy, handler);
  }

  // ── settling, requeue, expiry ──────────────────────────────────────────────────────────────

  /** Takes a copy back from its handler: requeued (now or later) or dead past the limit. */
  #takeBack(copy: Copy, delaySeconds: number): void {
    this.#deliveries.end(copy);
    copy.handler = null;
    if (copy.deliveries >= this.settings.requeueLimit) return this.#kill(copy, "requeueLimit");
    const at = delaySeconds === 0 ? 0 : this.hooks.now() + delaySeconds * 1000;
    this.hooks.onTakenBack?.(copy, at);
    if (at === 0) return this.#requeue(copy);
    this.#deliveries.delay(copy, at);
  }

  /** Redeliveries go to the back of their pool. */
  #requeue(copy: Copy): void {
    // The group may have been dropped and re-created (its handlers left and came back).
    const group = this.#groups.get(copy.group!.key) ?? copy.group!;
    copy.group = group;
    // Its handlers for this id may all have left meanwhile: it waits for the next one.
    if (!group.covers(copy.destination)) return this.#parking.park(copy);
    this.#enqueue(copy, this.#groups.pool(group, copy.destination));
  }

  #expireDeliveries(now: number): void {
    for (const handler of this.#deliveries.handlers) {
      const due = this.#deliveries.overdue(handler, now);
      if (!due) continue;
      for (const copy of due) {
        this.counters.timeout++;
        this.#takeBack(copy, 0);
      }
      this.pump(handler);
    }
  }

  /**
   * Puts back a message the store kept across a restart. It waits for a recipient like any other,
   * but outside the `maxItemsInQueue` bound: it was confirmed, and at start nobody has registered
   * yet, so counting it would drop confirmed messages before their consumers are back.
   */
  restore(message: Message): void {
    this.live++;
    this.counters.received++;
    this.backlog.resident += residentCost(message);
    const copy = this.#storedCopy(message, true);
    message.copies?.push(copy);
    this.#parking.parkAll([copy]);
  }

  /**
   * The copy, for anyone, of a message read back from the store: its delivery count goes on
   * (non-zero for a message delivered before a restart).
   */
  #storedCopy(message: Message, recovered: boolean): Copy {
    const copy = new Copy(message, message.destination, null);
    copy.recovered = recovered;
    copy.deliveries = message.deliveries;
    return copy;
  }

  /** A copy for whoever registers first; a slave tracks it, so that the master's removal finds it. */
  #parkUnrouted(copy: Copy): void {
    copy.message.copies?.push(copy);
    this.#parking.park(copy);
  }

  /**
   * Hands waiting copies to a group that just gained `ids`, oldest first. Copies waiting for
   * anyone are routed afresh (every present group gets one); copies that belong to a group go
   * back to that group only.
   */
  #flushWaiting(group: Group, ids: Set<string>): void {
    const waiting = this.#parking.waiting;
    for (const copy of this.#parking.takeFor(group, ids)) {
      if (copy.group !== null) {
        copy.group = group;
        this.#enqueue(copy, this.#groups.pool(group, copy.destination));
        continue;
      }
      if (!this.#route(copy.message)) {
        waiting.add(copy);
        continue;
      }
      copy.state = CopyState.SETTLED;
      this.#unref(copy.message);
    }
  }

  /** Keeps a message from settling (its store row stays) until `endHold()`. */
  hold(message: Message): void {
    message.refs++;
  }

  /** Lets a held message settle once nothing else refers to it. */
  endHold(message: Message): void {
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
    this.backlog.resident -= residentCost(message);
    this.hooks.onSettled(message);
  }

  // ── inspection and purge (admin API) ───────────────────────────────────────────────────────

  /** The registered handlers, earliest registrant first (queue_view.ts builds snapshots of them). */
  handlers(): Handler[] {
    return this.#deliveries.bySeq();
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
    for (const copy of this.#deliveries.delayed()) if (matches(copy)) removed.push(copy);
    for (const copy of this.#parking.waiting.ordered()) {
      if (!matches(copy)) continue;
      this.#parking.waiting.delete(copy);
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
    for (const handler of this.#deliveries.bySeq()) yield* handler.inflight.values();
    yield* [...this.#deliveries.delayed()].sort((a, b) => a.at - b.at);
    yield* this.#parking.waiting.ordered();
  }
}
