/**
 * How messages enter the queues once a send is accepted: numbered in arrival order, stored when
 * durable, remembered against resends, and handed to their queue (or left paged in the store).
 * Also the ways back in that skip a client's checks: rows read from the store (at start, or
 * paged) and messages a master streams to this slave.
 */
import type { AppendOp } from "../protocol/peer_ops.ts";
import { copyBytes } from "../protocol/bytes.ts";
import type { Cluster } from "./cluster/cluster.ts";
import type { Mirror } from "./cluster/mirror.ts";
import { RecentIds } from "./dedup.ts";
import { SharedSettlement } from "./shared_settlement.ts";
import { RecentMap } from "../protocol/recent.ts";
import type { Logger } from "./log.ts";
import { type Copy, Message } from "./queue/message.ts";
import type { Pager } from "./queue/pager.ts";
import type { Queue } from "./queue/queue.ts";
import type { BrokerCounters } from "./stats/stats.ts";
import { canPage, type DurableMode, type Store, type StoredMessage } from "./store/store.ts";
import { mayOutliveItsWaiters } from "./internal/promises.ts";

export interface IntakeHost {
  readonly store: Store | null;
  readonly cluster: Cluster;
  readonly log: Logger;
  /** The broker's counters: a message accepted counts as `received`. */
  readonly counters: BrokerCounters;
  queue(name: string): Queue;
  queues(): Iterable<Queue>;
  /** The paging of durable queues (null: a store that cannot page, or none). */
  pager(): Pager | null;
  /** What tracks the messages of a queue being moved in (move/moves.ts), or null. */
  incoming(queue: string): Mirror | null;
}

/**
 * A message whose commit runs: its queue, itself, the log entry that streamed it as master (0:
 * none), and that commit.
 */
type Committing = [queue: Queue, message: Message, logIndex: number, commit: Promise<void>];
const NOT_YET: Promise<void> = Promise.resolve();

/** Unlogged messages a slave remembers: the sends of a failover's moments, with room to spare. */
const UNLOGGED = 100_000;
/**
 * The newest stored messages whose ids a start remembers as seen (resends after a crash): more
 * than a sender keeps in flight, and read in a few milliseconds.
 */
const RECOGNIZED_AT_START = 32_768;
/** Requeues a slave keeps for messages it holds in its store only (paged) until they are read back. */
const PAGED_REQUEUES = 10_000;

export class Intake {
  /** Recently accepted message ids: a resent duplicate is confirmed but not queued twice. */
  readonly #recentIds = new RecentIds();
  /**
   * Messages whose commit is running, by id, with that commit: a resend meanwhile shares it. The
   * commit is kept here rather than on the message, which would take an object more per message.
   */
  readonly #storing = new Map<string, Committing>();
  /** Sends waiting for the replicas, by the promise they wait on: unlogged if the replicas refuse them. */
  readonly #replicating = new SharedSettlement<string>(
    () => undefined,
    (ids) => ids.forEach((id) => this.noteUnlogged(id)),
    false,
  );
  #joined: { stored: Promise<void>; replicated: Promise<void>; both: Promise<void> } | null = null;
  readonly #committing = new SharedSettlement<Committing>(
    (batch) => this.#committed(batch),
    (batch) => this.#refused(batch),
    true,
  );
  #seq = 0;
  /**
   * Messages held here that no other broker is known to hold: a client sent them while this
   * broker was a slave and no master streamed them to it (the master died first, or refused
   * them), or, as master, their replicas dropped out before confirming them. As master, a resend
   * of one is streamed before it is confirmed.
   */
  readonly #unlogged = new RecentMap<string, true>(UNLOGGED);
  /** On a slave: requeues of messages held in the store only (paged), applied when they are read back. */
  readonly #pagedRequeues = new RecentMap<string, [deliveries: number, at: number]>(PAGED_REQUEUES);

  constructor(readonly host: IntakeHost) {}

  /** A client's send accepted by this slave: unlogged until its master streams it. */
  noteUnlogged(messageId: string): void {
    this.#unlogged.set(messageId, true);
  }

  /**
   * True for a message this broker holds that never came through the log: a resend of it must
   * be streamed to the replicas before it is confirmed.
   */
  isUnlogged(messageId: string): boolean {
    return this.#unlogged.size > 0 && this.#unlogged.has(messageId);
  }

  /**
   * A resend of a message this master holds from its time as a slave, which no log entry carries
   * (`message` is the resend, not queued): it is streamed now (replicas that hold it already keep
   * their copy) and confirmed once the in-sync replicas have it, so a confirmed message is never
   * on this broker alone.
   */
  streamResend(channelName: string, message: Message): void | Promise<void> {
    const replication = this.host.cluster.replication;
    replication.checkReplicas(channelName); // refused: it stays unlogged, for the next resend
    this.logged(message.id);
    const replicated = replication.waitFor(replication.append(message), channelName);
    return replicated?.catch((error) => {
      this.noteUnlogged(message.id);
      throw error;
    });
  }

  /**
   * A resend of a message this master holds or is storing (`held`: true, or its commit): its
   * first send may still wait for the replicas, or they may have dropped out before holding it, so
   * it is confirmed once the in-sync set holds the log as far as it goes now, which includes it.
   */
  confirmHeld(channelName: string, held: true | Promise<void>): void | Promise<void> {
    const replication = this.host.cluster.replication;
    replication.checkReplicas(channelName); // with minInSyncReplicas 1, neither this nor waitFor asks anything
    const index = replication.index;
    // Nothing logged yet: what this master holds came with its catch-up, which its in-sync slaves hold.
    const replicated = index === 0 ? undefined : replication.waitFor(index, channelName);
    if (held === true) return replicated;
    return replicated === undefined ? held : this.storedAndReplicated(held, replicated);
  }

  /**
   * A master's send is confirmed once it is stored here and the in-sync replicas hold it. A refusal
   * by the replicas leaves the message here: sent again, it is not queued twice, and it is
   * streamed again before that resend is confirmed. The sends of one commit and one burst to the
   * replicas share both promises, and so the joined one too.
   */
  confirmedWhen(messageId: string, stored: void | Promise<void>, replicated: Promise<void>): Promise<void> {
    this.#replicating.add(replicated, messageId);
    return this.storedAndReplicated(stored, replicated);
  }

  /** Settles once both have; the same two promises give the same joined one (a whole burst shares it). */
  storedAndReplicated(stored: void | Promise<void>, replicated: Promise<void>): Promise<void> {
    if (stored === undefined) return replicated;
    const joined = this.#joined;
    if (joined !== null && joined.stored === stored && joined.replicated === replicated) return joined.both;
    const both = mayOutliveItsWaiters(stored.then(() => replicated));
    this.#joined = { stored, replicated, both };
    return both;
  }

  /** The message is in the log now. */
  logged(messageId: string): void {
    this.#unlogged.delete(messageId);
  }

  /** The next arrival number (dead letters take theirs here too). */
  nextSeq(): number {
    return this.#seq++;
  }

  /** The arrival number the next message will get. */
  get seq(): number {
    return this.#seq;
  }

  /** The messages whose commit is running. */
  *storing(): Iterable<Message> {
    for (const [, message] of this.#storing.values()) yield message;
  }

  /**
   * A resend of a message accepted already: true when it is held (confirm it at once), the
   * running commit when it is being stored (confirm it with that), false for a new message.
   */
  resent(messageId: string): boolean | Promise<void> {
    if (this.#recentIds.has(messageId)) return true;
    return this.commitOf(messageId) ?? false;
  }

  /**
   * Messages accepted here were dropped because the master does not hold them (a snapshot left
   * them out, or this slave's log went back): the ids accepted so far, seeded at start included,
   * no longer prove a message is held, so a resend of any is stored again. Sends of the moments
   * before may then be stored twice (duplicates); none is confirmed without being held.
   */
  forgetAcceptedIds(): void {
    this.#recentIds.clear();
  }

  /** A message being stored (its commit runs), by id, or null. */
  storingMessage(messageId: string): Message | null {
    return this.#storing.get(messageId)?.[1] ?? null;
  }

  /** The commit storing a message, while it runs. */
  commitOf(messageId: string): Promise<void> | undefined {
    return this.#storing.get(messageId)?.[3];
  }

  /**
   * Where a message not in memory is: being stored, or held in the store only (paged: only a
   * queue with a backlog has such rows); null when it is not here.
   */
  whereIs(id: string): "storing" | "paged" | null {
    if (this.#storing.has(id)) return "storing";
    const store = this.host.store;
    if (!canPage(store)) return null;
    for (const queue of this.host.queues()) {
      if (queue.backlog.count > 0) return store.holds(id) ? "paged" : null;
    }
    return null;
  }

  /** A new message, numbered in arrival order; its body is copied out of the socket's chunk. */
  create(id: string, queue: Queue, destination: string, body: Uint8Array, created: number): Message {
    // Copy the body out of the socket chunk once: the queue keeps it, a view would pin the chunk.
    return new Message(id, queue.name, destination, copyBytes(body), created, this.#seq++);
  }

  /**
   * Stores (when durable) and queues a message. Returns a promise while its commit runs; a resend
   * meanwhile shares it. A refused commit is streamed to slaves as removed. `logIndex`: the entry
   * that streamed it as master (0: none), which a restart may go on from once it is stored.
   */
  store(queue: Queue, message: Message, logIndex = 0): void | Promise<void> {
    const stored = this.storeFor(queue)?.append(message, queue.settings.durability as DurableMode);
    if (stored === undefined) {
      if (logIndex > 0) this.host.cluster.positions.committed(logIndex);
      this.#accept(queue, message);
      return;
    }
    // Every message of one commit shares its promise: accepted together, in arrival order.
    const storing: Committing = [queue, message, logIndex, NOT_YET];
    const committed = (storing[3] = this.#committing.add(stored, storing));
    this.#storing.set(message.id, storing);
    return committed;
  }

  /** The commit holding these messages is on disk. */
  #committed(batch: Committing[]): void {
    const positions = this.host.cluster.positions;
    for (const [queue, message, logIndex] of batch) {
      this.#storing.delete(message.id);
      if (logIndex > 0) positions.committed(logIndex);
      try {
        this.#accept(queue, message);
      } catch (error) {
        // Stored, so kept (and confirmed): a fault here must not hold back the rest of the commit.
        this.host.log.failure("queue", `queue=${queue.name};message=${message.id};cannot queue a stored message`, error);
      }
    }
  }

  /** The commit holding these messages failed: nothing of it is kept, and slaves drop them too. */
  #refused(batch: Committing[]): void {
    const master = this.host.cluster.isMaster;
    for (const [, message] of batch) {
      // Remembered as a duplicate only once stored: a resend of a refused message must be retried.
      this.#storing.delete(message.id);
      if (master) this.host.cluster.replication.remove(message.id);
    }
  }

  #accept(queue: Queue, message: Message): void {
    this.#recentIds.add(message.id);
    this.host.counters.received++;
    if (this.paged(queue, message)) return;
    const mirror = this.#mirror(queue);
    mirror?.track(message);
    queue.publish(message);
    mirror?.accepted(queue, message);
  }

  /**
   * A slave tracks the messages it queues, to drop them when the master's clients ack them; so
   * does the target of a queue move, for the messages the source settles meanwhile.
   */
  #mirror(queue: Queue): Mirror | null {
    return this.host.incoming(queue.name) ?? (this.host.cluster.isMaster ? null : this.host.cluster.mirror);
  }

  /** True when a stored message stays in the store only (its durable queue is beyond its memory budget). */
  paged(queue: Queue, message: Message): boolean {
    const pager = this.host.pager();
    return pager !== null && queue.settings.durability !== "memory" && pager.page(queue, message);
  }

  /** A message for a row of the store, numbered as it arrives now. */
  #fromRecord(record: StoredMessage): Message {
    const message = new Message(record.id, record.queue, record.destination, record.body, record.created, this.#seq++);
    message.deliveries = record.deliveries ?? 0;
    message.deadLetter = record.deadLetter ?? null;
    message.notBefore = record.notBefore ?? 0; // a nack's delay outlives a restart
    this.#recentIds.add(record.id);
    return message;
  }

  /** Puts a message read back from the store (paged, or stored before this start) into its queue. */
  admit(queue: Queue, record: StoredMessage, recovered: boolean): void {
    const message = this.#fromRecord(record);
    // The message stands for its row from now on (the store reads `position`): the record is not kept.
    message.position = record.position;
    if (this.#pagedRequeues.size > 0) this.#pagedRequeue(queue, message);
    const mirror = this.#mirror(queue);
    mirror?.track(message);
    queue.admit(message, recovered);
    mirror?.accepted(queue, message);
  }

  /**
   * At start, before the port opens: every message the store kept comes back. A store that pages
   * leaves them on disk and each queue reads one page (a restart does not load the backlog);
   * another store's messages are all restored.
   */
  recover(): void {
    const store = this.host.store;
    if (store === null) return;
    // A queue that pages reads only its oldest messages back: the newest, whose senders may not
    // have been told they were confirmed, are the ones they resend after a crash.
    const newest = store.newestIds?.(RECOGNIZED_AT_START);
    if (newest !== undefined) this.#recentIds.seed(newest);
    const pager = this.host.pager();
    const total = pager === null ? this.restore(store.load()) : pager.recover();
    if (total === 0) return;
    let resident = 0;
    for (const queue of this.host.queues()) resident += queue.live;
    const paged = pager === null ? "" : `;in memory ${resident} of them, the rest read as needed`;
    this.host.log.info("store", `recovered ${total} messages${paged}`);
  }

  /**
   * Puts back in memory, in arrival order, every message a store that cannot page kept (waiting,
   * ready or in flight), at start. Returns how many.
   */
  restore(records: Iterable<StoredMessage>): number {
    let restored = 0;
    for (const record of records) {
      const message = this.#fromRecord(record);
      message.record = record;
      const queue = this.host.queue(record.queue);
      const mirror = this.#mirror(queue);
      mirror?.track(message);
      queue.restore(message);
      mirror?.accepted(queue, message);
      restored++;
    }
    return restored;
  }

  /**
   * A slave stores a message its master streamed (snapshot or live). No rules, format or bound:
   * the master checked them. A message held already is only marked as listed by the snapshot.
   */
  replica(op: AppendOp, generation: number): void | Promise<void> {
    const [, , id, queueName, destination, body, created, deliveries, deadLetter] = op;
    if (this.#unlogged.size > 0) this.logged(id);
    const mirror = this.host.cluster.mirror;
    const held = mirror.get(id);
    if (held) {
      held.syncGeneration = generation;
      return;
    }
    const storing = this.commitOf(id);
    if (storing) {
      return storing.then(() => {
        const message = mirror.get(id);
        if (message) message.syncGeneration = generation;
      });
    }
    // Held on disk only (paged: only a queue with a backlog has such rows): nothing to add.
    const queue = this.host.queue(queueName);
    const store = this.host.store;
    if (queue.backlog.count > 0 && canPage(store) && store.holds(id)) return;
    const message = this.create(id, queue, destination, body, created);
    message.deliveries = deliveries;
    message.deadLetter = deadLetter;
    message.syncGeneration = generation;
    return this.store(queue, message);
  }

  /**
   * A copy came back from its handler, due again at `at` (0: at once): the store keeps a delay
   * across restarts, and the slaves count the delivery and hold the message back too.
   */
  takenBack(queue: Queue, copy: Copy, at: number): void {
    const message = copy.message;
    if (at > 0) this.storeFor(queue)?.noteDelay(message.record ?? message, at, copy.deliveries);
    if (this.host.cluster.isMaster) this.host.cluster.replication.requeued(message.id, copy.deliveries, at);
  }

  /**
   * On a slave: the master requeued a message after `deliveries` deliveries, due again at `at`
   * (REQUEUED). It is counted and held back here too, and its row keeps both: at once when it is
   * in memory or being stored, once it is read back when it is held in the store only (paged).
   */
  requeuedMirrored(messageId: string, deliveries: number, at: number): void {
    const held = this.host.cluster.mirror.get(messageId);
    const storing = held === undefined ? this.#storing.get(messageId) : undefined;
    const message = held ?? storing?.[1];
    if (message === undefined) {
      if (this.whereIs(messageId) !== "paged") return; // settled here already
      const earlier = this.#pagedRequeues.get(messageId);
      this.#pagedRequeues.set(messageId, [Math.max(deliveries, earlier?.[0] ?? 0), at]);
      return;
    }
    const queue = this.host.queue(message.queue);
    // Being stored, it is queued once its commit ends: its copies start from the message's fields.
    if (storing !== undefined) message.requeued(deliveries, at);
    else queue.mirrored.requeued(message, deliveries, at);
    this.#storeRequeue(queue, message, deliveries, at);
  }

  /** A paged message read back: a requeue the master told of meanwhile applies to it now. */
  #pagedRequeue(queue: Queue, message: Message): void {
    const requeue = this.#pagedRequeues.get(message.id);
    if (requeue === undefined) return;
    this.#pagedRequeues.delete(message.id);
    const [deliveries, at] = requeue;
    message.requeued(deliveries, at);
    this.#storeRequeue(queue, message, deliveries, at);
  }

  #storeRequeue(queue: Queue, message: Message, deliveries: number, at: number): void {
    const store = this.storeFor(queue);
    if (at > 0) store?.noteDelay(message.record ?? message, at, deliveries);
    else if (deliveries > 0) store?.noteDelivery(message.record ?? message, deliveries);
  }

  /** The store a queue's messages go to; null for a memory-only queue (or a broker with no store). */
  storeFor(queue: Queue): Store | null {
    return queue.settings.durability === "memory" ? null : this.host.store;
  }
}
