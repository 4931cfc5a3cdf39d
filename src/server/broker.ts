/**
 * The broker core: owns the queues, the sessions, the configuration and the statistics, and
 * routes what sessions ask for. No sockets here (tcp.ts) and no timers of its own: the server
 * calls `tick()`, so the whole engine can be driven by tests with an injected clock.
 */
import { KittenError, parseChannel, queueName } from "../protocol/mod.ts";
import type { AppendOp } from "../protocol/peer_ops.ts";
import { join } from "node:path";
import { Cluster } from "./cluster/cluster.ts";
import { registerClusterGauges } from "./cluster/metrics.ts";
import { channelSettings, type Config, durableKey } from "./config/config.ts";
import { RecentIds } from "./dedup.ts";
import { type CompiledSchema, compileSchemas } from "./schema/schema.ts";
import { encode } from "../protocol/cbor.ts";
import { decodeBody } from "../protocol/body.ts";
import { copyBytes } from "../protocol/bytes.ts";
import { verifyHelloToken } from "./security/auth.ts";
import { KeyRegistry } from "./security/pinning.ts";
import { type ClientGrants, compileRules, ExclusiveOwners, notAllowed, type Rules } from "./security/rules.ts";
import type { AuthProof } from "../protocol/ops.ts";
import { Logger } from "./log.ts";
import { groupKeyOf, Handler, type HandlerKind, Message } from "./queue/message.ts";
import { type DeadReason, Queue } from "./queue/queue.ts";
import { Stats } from "./stats/stats.ts";
import { canPage, type PagingStore, type QueueUsage, type Store, type StoredMessage } from "./store/store.ts";
import type { Snapshot, SnapshotEntry } from "./cluster/replica.ts";
import { Pager } from "./queue/pager.ts";
import { DiskFloor } from "./store/disk_floor.ts";
import type { DurableMode } from "./store/store.ts";
import type { Copy } from "./queue/message.ts";
import type { Session } from "./session.ts";

export interface BrokerOptions {
  now?: () => number;
  logger?: Logger;
  /** Where messages are kept safe; none (the default) keeps them in the queues' memory only. */
  store?: Store | null;
}

/** Where, under `registeredClientsPath`, the keys of peer brokers are pinned. */
export const PEER_KEYS_FOLDER = "peers";

/** Paged rows read from the store per step of a replica's snapshot. */
const SNAPSHOT_PAGE = 2_000;

/** How soon a dead letter the store refused is written again. */
const DEAD_LETTER_RETRY_MS = 500;

/** What `send` needs to know of the sending connection. */
export interface Sender {
  readonly clientId: string;
  readonly grants: ClientGrants;
}

interface Route {
  endpoint: string;
  version: string;
  destination: string;
  queue: Queue;
  /** The queue's format, when its channel entry has a `map`. */
  schema: CompiledSchema | undefined;
}

/**
 * Checks a body against its channel's format: only channels with a `map` pay for a decode.
 * Returns the body consumers receive: unchanged, or re-encoded when converters changed values.
 */
function conform(schema: CompiledSchema, channel: string, queue: string, body: Uint8Array): Uint8Array {
  let value: unknown;
  try {
    value = decodeBody(body);
  } catch (error) {
    throw new KittenError("BAD_FORMAT", `Cannot send to "${channel}": the body is not CBOR: ${(error as Error).message}`);
  }
  const result = schema.validate(value);
  if (!result.ok) {
    const first = result.issues[0]!;
    throw new KittenError(
      "BAD_FORMAT",
      `Cannot send to "${channel}": the message does not match the format of "${queue}": ` +
        `${result.issues.length} issue(s), first: ${first.field || "(message)"} ${first.error}`,
      result.issues,
    );
  }
  return result.value === value ? body : encode(result.value);
}

export class Broker {
  config: Config;
  readonly now: () => number;
  readonly log: Logger;
  readonly store: Store | null;
  readonly stats: Stats;
  readonly queues = new Map<string, Queue>();
  readonly sessions = new Set<Session>();
  /** Sessions with frames waiting to be written; flushed once per burst of input. */
  readonly dirty = new Set<Session>();
  /** Role, epoch, replication and election: what several brokers need (cluster/). */
  readonly cluster: Cluster;
  /** Compiled channel formats by queue name, replaced whole on reload. */
  schemas: Map<string, CompiledSchema>;
  /** Compiled `config.rules`, replaced whole on reload. */
  rules: Rules;
  /** Pinned public keys (`registeredClientsPath`). */
  registry: KeyRegistry;
  /**
   * Pinned public keys of peer brokers (`<registeredClientsPath>/peers`): apart from the clients',
   * so that a client that takes a peer's serviceId as its id first can never pass for that peer.
   */
  peerRegistry: KeyRegistry;
  /** Owners of ids read through exclusive (`!`) rules. */
  readonly exclusive = new ExclusiveOwners();
  /** True while the server closes every connection to stop (see Session.closed()). */
  shuttingDown = false;
  /** True after soft-stop started: new connections and sends are refused. */
  stopping = false;
  /** Recently accepted message ids: a resent duplicate is confirmed but not queued twice. */
  readonly #recentIds = new RecentIds();
  /** Messages whose commit is running, by id: a resend meanwhile shares that commit. */
  readonly #storing = new Map<string, Message>();
  #seq = 0;
  #handlerSeq = 0;
  /** Parsed channel names and their queue: senders reuse a handful, parsing each once is enough. */
  readonly #routes = new Map<string, Route>();
  /** Pages durable queues beyond their memory budget to the store (null: a store that cannot page, or none). */
  readonly #pager: Pager | null;
  /** Free space of the data directory's disk against `minFreeDiskBytes` (null without a store). */
  readonly disk: DiskFloor | null;

  constructor(config: Config, options: BrokerOptions = {}) {
    this.config = config;
    this.now = options.now ?? Date.now;
    this.log = options.logger ?? new Logger(config.logLevel);
    this.store = options.store ?? null;
    this.stats = new Stats(this.now());
    this.rules = compileRules(config.rules);
    this.schemas = compileSchemas(config.channels).schemas;
    this.registry = new KeyRegistry(config.registeredClientsPath);
    this.peerRegistry = new KeyRegistry(join(config.registeredClientsPath, PEER_KEYS_FOLDER));
    const broker = this;
    this.cluster = new Cluster({
      get config() {
        return broker.config;
      },
      store: this.store,
      queues: this.queues,
      log: this.log,
      now: () => this.now(),
      announceRole: () => this.#announceRole(),
      snapshot: () => this.#snapshot(),
      acceptReplica: (op, generation) => this.#acceptReplica(op, generation),
      nextSeq: () => this.#seq,
      // Paged messages the master removed: read on past the budget to reach them (Pager.starving()).
      removalsWaiting: () => {
        for (const queue of this.queues.values()) if (queue.backlog.count > 0) this.#pager?.starving(queue);
      },
    });
    registerClusterGauges(this.stats, this.cluster);
    this.#pager = canPage(this.store)
      ? new Pager(this.store, {
        log: this.log,
        queue: (name) => this.queue(name),
        admit: (queue, record, recovered) => this.#admit(queue, record, recovered),
        flush: () => this.flush(),
      })
      : null;
    this.disk = this.store ? new DiskFloor(config.dataDirectory, () => this.config.minFreeDiskBytes, this.now) : null;
  }

  /** Master and not fenced: only then does the broker deliver and confirm sends as master. */
  get isMaster(): boolean {
    return this.cluster.isMaster;
  }

  /** The role clients are told about. */
  get role(): "master" | "slave" {
    return this.cluster.role;
  }

  /** Raised at each promotion to master, kept in the store: fences an old master that comes back. */
  get epoch(): number {
    return this.cluster.epoch;
  }

  get fencedBy(): { epoch: number; master: string } | null {
    return this.cluster.fencedBy;
  }

  /** A client has seen a master with a higher epoch (FENCE). */
  fence(epoch: number, master: string, clientId: string): void {
    this.cluster.fence(epoch, master, `client "${clientId}"`);
  }

  /** Tells every client the current role and epoch; a new master starts delivering. */
  #announceRole(): void {
    for (const session of this.sessions) session.announceRole();
    if (this.isMaster) for (const session of this.sessions) session.pumpAll();
    this.flush();
  }

  /**
   * Swaps in a validated configuration; queues pick up their new settings at once. Throws (and
   * changes nothing) when the config needs a store this broker did not open, or when the epoch
   * of a promotion cannot be written.
   */
  reload(config: Config, options: { force?: boolean } = {}): void {
    const durable = durableKey(config);
    if (durable !== null && this.store === null) {
      // Accepting it would confirm sends "on disk" that no store writes.
      throw new KittenError(
        "CONFIG_INVALID",
        `Cannot reload: ${durable} asks for a durable mode, but this broker started without a store ` +
          `(every queue in memory); restart it to open one in its dataDirectory`,
      );
    }
    const previous = this.config;
    const rules = compileRules(config.rules);
    const schemas = compileSchemas(config.channels).schemas;
    // A promotion is checked (in sync?) and its epoch written before anything changes: a refusal,
    // or a store that refuses the epoch (STORE_UNAVAILABLE), leaves the broker as it was.
    const promotedEpoch = this.cluster.checkReload(config, options.force === true);
    if (promotedEpoch !== null) this.store?.setMeta("epoch", promotedEpoch);
    this.config = config;
    this.rules = rules;
    this.schemas = schemas;
    this.#routes.clear(); // routes cache each queue's schema
    if (config.registeredClientsPath !== this.registry.directory) {
      this.registry = new KeyRegistry(config.registeredClientsPath);
      this.peerRegistry = new KeyRegistry(join(config.registeredClientsPath, PEER_KEYS_FOLDER));
    } else {
      this.registry.forget();
      this.peerRegistry.forget();
    }
    this.log.minLevel = config.logLevel;
    for (const queue of this.queues.values()) queue.settings = channelSettings(config, queue.name);
    this.log.info("broker", `reloaded;queues=${this.queues.size}`);
    this.cluster.applyReload(previous, promotedEpoch, options.force === true);
  }

  /** A client acked, on the master, a copy this slave keeps: drop it here too. */
  mirrorAck(queueName: string, groupKey: string, destination: string, messageId: string): void {
    if (this.isMaster) return; // the master settles its own deliveries by tag
    this.cluster.mirror.acked(queueName, groupKey, destination, messageId);
  }

  queue(name: string): Queue {
    let queue = this.queues.get(name);
    if (!queue) {
      queue = new Queue(name, channelSettings(this.config, name), {
        now: this.now,
        onDead: (copy, reason) => this.#onDead(copy, reason),
        onDelivered: (copy) => {
          this.#storeFor(queue!)?.noteDelivery(copy.message.record ?? copy.message, copy.deliveries);
        },
        onSettled: (message) => {
          this.store?.remove(message.record ?? message);
          this.cluster.mirror.forget(message);
          if (this.isMaster) this.cluster.replication.remove(message.id);
          if (queue!.backlog.count > 0) this.#pager?.settled(queue!);
        },
        onStarving: () => this.#pager?.starving(queue!),
      });
      queue.mirroring = !this.isMaster; // a slave holds everything until acked or promoted
      this.queues.set(name, queue);
    }
    return queue;
  }

  /**
   * Accepts a message. Returns nothing when it is safe (or a promise that settles when it is);
   * throws a KittenError when it is refused. A message id seen recently is accepted again
   * without being queued twice: the sender resent it after a reconnect.
   */
  send(channelName: string, messageId: string, body: Uint8Array, sender: Sender): void | Promise<void> {
    if (this.stopping) throw new KittenError("STOPPING", `Cannot send to "${channelName}": the broker is stopping`);
    const { endpoint, version, destination, queue, schema } = this.#route(channelName);
    if (!this.rules.isOpen && !sender.grants.canWrite(endpoint, version, destination)) {
      throw notAllowed(sender.clientId, "send", channelName);
    }
    // A resend of an accepted message is confirmed before anything is paid for it (its format was checked the first time).
    if (this.#recentIds.has(messageId)) return;
    const storing = this.#storing.get(messageId)?.commit;
    if (storing) return storing; // the same message is being committed: confirm it with that commit
    if (schema) body = conform(schema, channelName, queue.name, body);
    const held = queue.live + queue.backlog.count;
    if (held >= queue.settings.maxMessagesPerQueue) {
      throw new KittenError(
        "QUEUE_FULL",
        `Cannot send to "${channelName}": queue "${queue.name}" holds ${held} messages (maxMessagesPerQueue)`,
      );
    }
    if (this.disk?.low && queue.settings.durability !== "memory") throw this.disk.refusal(channelName);
    const master = this.isMaster;
    if (master) this.cluster.replication.checkReplicas(channelName);
    // Copy the body out of the socket chunk once: the queue keeps it, a view would pin the chunk.
    const message = new Message(messageId, queue.name, destination, copyBytes(body), this.now(), this.#seq++);
    // Replicas store it while this broker does: the two commits overlap.
    const index = master ? this.cluster.replication.append(message) : 0;
    const stored = this.#store(queue, message);
    const replicated = master ? this.cluster.replication.waitFor(index, channelName) : undefined;
    if (replicated === undefined) return stored;
    // Confirmed when both hold; a refusal by the replicas leaves the message here (sent again, it is deduplicated).
    replicated.catch(() => {});
    return stored === undefined ? replicated : stored.then(() => replicated);
  }

  /**
   * Stores (when durable) and queues a message. Returns a promise while its commit runs; a resend
   * meanwhile shares it. A refused commit is streamed to slaves as removed.
   */
  #store(queue: Queue, message: Message): void | Promise<void> {
    const stored = this.#storeFor(queue)?.append(message, queue.settings.durability as DurableMode);
    if (stored === undefined) {
      this.#accept(queue, message);
      return;
    }
    const messageId = message.id;
    // Remembered as a duplicate only once stored: a resend of a refused message must be retried.
    const committed = stored.then(
      () => {
        this.#storing.delete(messageId);
        message.commit = null;
        this.#accept(queue, message);
      },
      (error) => {
        this.#storing.delete(messageId);
        message.commit = null;
        if (this.isMaster) this.cluster.replication.remove(messageId);
        throw error;
      },
    );
    message.commit = committed;
    this.#storing.set(messageId, message);
    return committed;
  }

  #accept(queue: Queue, message: Message): void {
    this.#recentIds.add(message.id);
    this.stats.counters.received++;
    if (this.#paged(queue, message)) return;
    if (!this.isMaster) this.cluster.mirror.track(message);
    queue.publish(message);
    if (!this.isMaster) this.cluster.mirror.accepted(queue, message);
  }

  /** True when a stored message stays in the store only (its durable queue is beyond its memory budget). */
  #paged(queue: Queue, message: Message): boolean {
    return this.#pager !== null && queue.settings.durability !== "memory" && this.#pager.page(queue, message);
  }

  /** Puts a message read back from the store (paged, or stored before this start) into its queue. */
  #admit(queue: Queue, record: StoredMessage, recovered: boolean): void {
    const message = new Message(record.id, record.queue, record.destination, record.body, record.created, this.#seq++);
    // The message stands for its row from now on (the store reads `position`): the record is not kept.
    message.position = record.position;
    message.deliveries = record.deliveries ?? 0;
    message.deadLetter = record.deadLetter ?? null;
    this.#recentIds.add(record.id);
    if (!this.isMaster) this.cluster.mirror.track(message);
    queue.admit(message, recovered);
    if (!this.isMaster) this.cluster.mirror.accepted(queue, message);
  }

  /**
   * A slave stores a message its master streamed (snapshot or live). No rules, format or bound:
   * the master checked them. A message held already is only marked as listed by the snapshot.
   */
  #acceptReplica(op: AppendOp, generation: number): void | Promise<void> {
    const [, , id, queueName, destination, body, created, deliveries, deadLetter] = op;
    const held = this.cluster.mirror.get(id);
    if (held) {
      held.syncGeneration = generation;
      return;
    }
    const storing = this.#storing.get(id)?.commit;
    if (storing) {
      return storing.then(() => {
        const message = this.cluster.mirror.get(id);
        if (message) message.syncGeneration = generation;
      });
    }
    // Held on disk only (paged): stored already, nothing to add.
    if (canPage(this.store) && this.store.holds(id)) return;
    const message = new Message(id, queueName, destination, copyBytes(body), created, this.#seq++);
    message.deliveries = deliveries;
    message.deadLetter = deadLetter;
    message.syncGeneration = generation;
    return this.#store(this.queue(queueName), message);
  }

  /**
   * Every message this broker holds, for a replica: those in memory and those being stored, in
   * arrival order, then each durable queue's paged ones, read from the store page by page as the
   * replica takes them. A paged queue lists the rows from where its paged messages started, as
   * many as it had then (rows added since come through the live stream as well: the replica
   * recognises them).
   */
  #snapshot(): Snapshot {
    const inMemory = new Set<Message>();
    for (const queue of this.queues.values()) for (const copy of queue.liveCopies()) inMemory.add(copy.message);
    for (const message of this.#storing.values()) inMemory.add(message);
    const messages = [...inMemory].sort((a, b) => a.seq - b.seq);
    const store = this.store;
    const paged = canPage(store)
      ? [...this.queues.values()].filter((q) => q.backlog.count > 0).map((q) => ({ name: q.name, from: q.backlog.from, count: q.backlog.count }))
      : [];
    function* entries(): Generator<SnapshotEntry> {
      yield* messages;
      for (const queue of paged) {
        let from = queue.from;
        let left = queue.count;
        while (left > 0) {
          const rows = (store as PagingStore).readQueue(queue.name, from, Math.min(left, SNAPSHOT_PAGE));
          if (rows.length === 0) break;
          yield* rows;
          left -= rows.length;
          from = rows.at(-1)!.position! + 1;
        }
      }
    }
    return { count: messages.length + paged.reduce((sum, q) => sum + q.count, 0), entries: entries() };
  }

  /**
   * At start, before the port opens: every message the store kept comes back. A store that pages
   * leaves them on disk and each queue reads one page (a restart does not load the backlog);
   * another store's messages are all restored.
   */
  recover(): void {
    if (this.store === null) return;
    if (this.#pager === null) return this.restore(this.store.load());
    const total = this.#pager.recover();
    if (total > 0) this.log.info("store", `recovered ${total} messages;in memory ${this.#resident()} of them, the rest read as needed`);
  }

  #resident(): number {
    let live = 0;
    for (const queue of this.queues.values()) live += queue.live;
    return live;
  }

  /**
   * Deletes a queue's paged messages (of one destination id, or all) from the store: what an
   * operator's purge of the queue must remove besides the copies in memory. Returns how many.
   */
  purgePaged(queue: Queue, destination?: string): number {
    const backlog = queue.backlog;
    if (this.#pager === null || backlog.count === 0) return 0;
    const purged = this.#pager.store.purgeFrom(queue.name, backlog.from, destination);
    backlog.count = destination === undefined ? 0 : Math.max(0, backlog.count - purged);
    backlog.recovered = Math.min(backlog.recovered, backlog.count);
    return purged;
  }

  /** A queue's share of the store (rows and estimated bytes); zeros without a store that tracks it. */
  diskUsage(queueName: string): QueueUsage {
    return canPage(this.store) ? this.store.queueUsage(queueName) : { messages: 0, bytes: 0 };
  }

  /**
   * Puts back messages in memory, in arrival order (a store that cannot page, at start; or
   * messages a peer sent): every one that was not acked (waiting, ready or in flight). They are
   * not paged: the caller bounds how many it gives.
   */
  restore(records: Iterable<StoredMessage>): void {
    let restored = 0;
    for (const record of records) {
      const message = new Message(record.id, record.queue, record.destination, record.body, record.created, this.#seq++);
      message.record = record;
      message.deliveries = record.deliveries ?? 0;
      message.deadLetter = record.deadLetter ?? null;
      this.#recentIds.add(record.id);
      if (!this.isMaster) this.cluster.mirror.track(message);
      this.queue(record.queue).restore(message);
      restored++;
    }
    if (restored > 0) this.log.info("store", `recovered ${restored} messages`);
  }

  /** Creates a handler for a listen/consume registration (the session validated the channel). */
  subscribe(
    session: Session,
    kind: HandlerKind,
    sub: number,
    endpoint: string,
    version: string,
    ids: readonly string[],
    requestedPrefetch: number | null,
  ): Handler {
    const queue = this.queue(queueName(endpoint, version));
    const limit = kind === "consume" ? queue.settings.prefetch : queue.settings.listenerPrefetch;
    const prefetch = Math.min(requestedPrefetch ?? limit, limit);
    const handler = new Handler(this.#handlerSeq++, sub, kind, groupKeyOf(kind, session.clientId), new Set(ids), prefetch, session);
    queue.subscribe(handler);
    return handler;
  }

  /** Deliveries not yet acked, across queues. */
  inflight(): number {
    let count = 0;
    for (const queue of this.queues.values()) count += queue.depth().inflight;
    return count;
  }

  /** Runs timers of every queue that has some; called by the server about every 25 ms. */
  tick(): void {
    const now = this.now();
    this.disk?.refresh();
    for (const queue of this.queues.values()) if (queue.hasTimers) queue.tick(now);
    this.cluster.tick();
    this.flush();
  }

  /** Writes every session's pending frames: one socket write per session per burst. */
  flush(): void {
    if (this.isMaster) this.cluster.replication.flush();
    // A flush may let a paused session take more deliveries, which makes it dirty again.
    while (this.dirty.size > 0) {
      const sessions = [...this.dirty];
      this.dirty.clear();
      for (const session of sessions) {
        // One session's bug must not strand the answers of the sessions after it.
        try {
          session.flush();
        } catch (error) {
          this.log.failure("socket", `client=${session.clientId};flush failed`, error);
        }
      }
    }
  }

  /**
   * Checks a client's proof at hello. A pinned id must prove the pinned key; a new id must be
   * accepted by the rules, prove the key it presents, and that key is then pinned (the loser of
   * a race between two first connections gets KEY_MISMATCH).
   */
  async authenticate(clientId: string, nonce: string, proof: AuthProof, peer = false): Promise<void> {
    const { serviceId } = this.config;
    const registry = peer ? this.peerRegistry : this.registry;
    const pinned = await registry.get(clientId);
    if (pinned !== null) {
      await registry.pin(clientId, proof.publicKey); // KEY_MISMATCH names the problem better than a bad signature
      await verifyHelloToken({ token: proof.token, nonce, serviceId, publicKeyPem: pinned, clientId });
      return;
    }
    // A broker listed in cluster.peers is accepted by that listing; rules are for clients.
    if (!peer && !this.rules.accepts(clientId)) {
      throw new KittenError("UNKNOWN_CLIENT", `Cannot accept client "${clientId}": no rule's client matches this new id`);
    }
    await verifyHelloToken({ token: proof.token, nonce, serviceId, publicKeyPem: proof.publicKey, clientId });
    if (await registry.pin(clientId, proof.publicKey) === "pinned") {
      this.log.info("auth", `${peer ? "peer" : "client"}=${clientId};public key pinned`);
    }
  }

  /** The store a queue's messages go to; null for a memory-only queue (or a broker with no store). */
  #storeFor(queue: Queue): Store | null {
    return queue.settings.durability === "memory" ? null : this.store;
  }

  #route(name: string): Route {
    let route = this.#routes.get(name);
    if (route) return route;
    const channel = parseChannel(name, "Cannot send to");
    route = {
      endpoint: channel.endpoint,
      version: channel.version,
      destination: channel.id,
      queue: this.queue(queueName(channel.endpoint, channel.version)),
      schema: this.schemas.get(queueName(channel.endpoint, channel.version)),
    };
    if (this.#routes.size >= 10_000) this.#routes.clear();
    this.#routes.set(name, route);
    return route;
  }

  /**
   * A copy died (requeue limit, overflow or ttl): it is logged and, when its channel names a
   * `deadLetter` queue, re-published there with its original body and where it came from.
   */
  #onDead(copy: Copy, reason: DeadReason): void {
    const message = copy.message;
    const target = channelSettings(this.config, message.queue).deadLetter;
    this.log.warn(
      "queue",
      `queue=${message.queue};id=${copy.destination};messageId=${message.id};deliveries=${copy.deliveries};` +
        `reason=${reason};deadLetter=${target ?? "none"};message dead`,
    );
    if (target === null) return;
    const queue = this.queue(target);
    if (queue.live + queue.backlog.count >= queue.settings.maxMessagesPerQueue) {
      this.log.error("queue", `queue=${target};messageId=${message.id};dead-letter queue full;message dropped`);
      return;
    }
    const dead = new Message(`${message.id}~${this.#seq}`, target, copy.destination, message.body, this.now(), this.#seq++);
    dead.deadLetter = {
      reason,
      channel: `${message.queue}/${copy.destination}`,
      messageId: message.id,
      deliveries: copy.deliveries,
    };
    const store = this.#storeFor(queue);
    if (this.isMaster) this.cluster.replication.append(dead);
    if (!store) return queue.publish(dead);
    const publish = () => {
      if (!this.#paged(queue, dead)) queue.publish(dead);
    };
    // The original stays stored until its dead letter is: while that write fails it is retried,
    // and the original is kept (recovered at the next start) rather than lost between two queues.
    const origin = this.queues.get(message.queue)!;
    origin.hold(message);
    const write = async (): Promise<void> => {
      try {
        await store.append(dead, queue.settings.durability as DurableMode);
      } catch (error) {
        this.log.error("queue", `messageId=${message.id};dead letter not stored, original kept, retrying: ${error}`);
        if (!this.shuttingDown) setTimeout(run, DEAD_LETTER_RETRY_MS);
        return;
      }
      publish();
      origin.release(message);
    };
    // Off the socket callback: a throw here must be logged, not become an unhandled rejection.
    const run = () => {
      write().catch((error) => this.log.failure("queue", `messageId=${message.id};dead letter`, error));
    };
    run();
  }
}
