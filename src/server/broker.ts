/**
 * The broker core: owns the queues, the sessions, the configuration and the statistics, and
 * routes what sessions ask for. No sockets here (tcp.ts) and no timers of its own: the server
 * calls `tick()`, so the whole engine can be driven by tests with an injected clock.
 */
import { KittenError, queueName } from "../protocol/mod.ts";
import { Cluster } from "./cluster/cluster.ts";
import { registerClusterGauges } from "./cluster/metrics.ts";
import { channelSettings, type Config, durableKey } from "./config/config.ts";
import { type CompiledSchema, compileSchemas } from "./schema/schema.ts";
import { Authenticator } from "./security/authenticator.ts";
import type { KeyRegistry } from "./security/pinning.ts";
import { compileRules, ExclusiveOwners, type Rules } from "./security/rules.ts";
import type { AuthProof } from "../protocol/ops.ts";
import { Logger } from "./log.ts";
import { Queue } from "./queue/queue.ts";
import { Intake } from "./intake.ts";
import { Stats } from "./stats/stats.ts";
import { canPage, type QueueUsage, type Store } from "./store/store.ts";
import { snapshotOf } from "./cluster/snapshot.ts";
import type { Snapshot } from "./cluster/replica.ts";
import { DeadLetters } from "./dead_letters.ts";
import { Routes } from "./routes.ts";
import { Pager } from "./queue/pager.ts";
import { DiskFloor } from "./store/disk_floor.ts";
import type { Copy } from "./queue/message.ts";
import type { Peer } from "./peer.ts";
import { Placement } from "./placement.ts";
import { admit, admitMoved, type AdmissionHost, type Sender } from "./admission.ts";
import type { AppendOp } from "../protocol/peer_ops.ts";
import { Moves } from "./move/moves.ts";
import { collectAfterPaging } from "./collector.ts";

export interface BrokerOptions {
  now?: () => number;
  logger?: Logger;
  /** Where messages are kept safe; none (the default) keeps them in the queues' memory only. */
  store?: Store | null;
}

export type { Sender } from "./admission.ts";

/**
 * Sessions reach the broker through a narrow surface: `attach`/`detach` a connection,
 * `markDirty` when it has frames to write, and the operations it dispatches (send, subscribe,
 * authenticate, ...). The broker knows a session only as a `Peer`; its own state (config, rules,
 * connections, flags) is written here and nowhere else.
 */
export class Broker {
  #config: Config;
  readonly now: () => number;
  readonly log: Logger;
  readonly store: Store | null;
  readonly stats: Stats;
  readonly queues = new Map<string, Queue>();
  readonly #sessions = new Set<Peer>();
  /** Connections with frames waiting to be written; flushed once per burst of input. */
  readonly #dirty = new Set<Peer>();
  /** Role, epoch, replication and election: what several brokers need (cluster/). */
  readonly cluster: Cluster;
  /** Compiled channel formats by queue name, replaced whole on reload. */
  #schemas: Map<string, CompiledSchema>;
  /** Compiled `config.rules`, replaced whole on reload. */
  #rules: Rules;
  /** Pinned keys of clients and peers, and the proof checked at hello. */
  readonly #auth: Authenticator;
  /** Owners of ids read through exclusive (`!`) rules: claimed all or none per registration. */
  readonly exclusive = new ExclusiveOwners();
  /** True while the server closes every connection to stop (see Session.tearDown()). */
  #shuttingDown = false;
  /** True after soft-stop started: new connections and sends are refused. */
  #stopping = false;
  /** How accepted messages enter the queues (numbering, storing, dedup of resends). */
  readonly #intake: Intake;
  readonly #routes: Routes;
  readonly #deadLetters: DeadLetters;
  /** Pages durable queues beyond their memory budget to the store (null: a store that cannot page, or none). */
  readonly #pager: Pager | null;
  /** Free space of the data directory's disk against `minFreeDiskBytes` (null without a store). */
  readonly disk: DiskFloor | null;
  /** Which queues this broker's group owns, when queues are spread over groups (`cluster.etcd`). */
  readonly placement: Placement;
  /** What every send passes (admission.ts), reading the broker's state as it is at each send. */
  readonly #admission: AdmissionHost;
  /** Queue moves between groups: asked, driven, taken in (move/moves.ts). */
  readonly moves: Moves;

  constructor(config: Config, options: BrokerOptions = {}) {
    this.#config = config;
    this.now = options.now ?? Date.now;
    this.log = options.logger ?? new Logger(config.logLevel);
    this.store = options.store ?? null;
    this.stats = new Stats(this.now());
    this.#rules = compileRules(config.rules);
    this.#schemas = compileSchemas(config.channels).schemas;
    this.#auth = new Authenticator(config.registeredClientsPath, this.log);
    const broker = this;
    this.placement = new Placement({
      get config() {
        return broker.config;
      },
      get isMaster() {
        return broker.isMaster;
      },
      log: this.log,
      queues: () => this.queues.values(),
      changed: (queues) => this.#mapChanged(queues),
      movesChanged: (records) => this.moves.recordsChanged(records),
    });
    this.#routes = new Routes((name) => this.queue(name), () => this.#schemas, (queue) => this.placement.unplaced(queue));
    this.#deadLetters = new DeadLetters({
      get config() {
        return broker.config;
      },
      get isMaster() {
        return broker.isMaster;
      },
      get shuttingDown() {
        return broker.shuttingDown;
      },
      log: this.log,
      now: () => this.now(),
      queue: (name) => this.queue(name),
      nextSeq: () => this.#intake.nextSeq(),
      storeFor: (queue) => this.#intake.storeFor(queue),
      replicate: (message) => this.cluster.replication.append(message),
      publishStored: (queue, message) => {
        if (!this.#intake.paged(queue, message)) queue.publish(message);
      },
    });
    this.cluster = new Cluster({
      get config() {
        return broker.config;
      },
      store: this.store,
      queues: this.queues,
      log: this.log,
      now: () => this.now(),
      announceRole: () => this.#announceRole(),
      snapshot: () => snapshotOf(this.queues.values(), this.#intake.storing(), this.store),
      acceptReplica: (op, generation) => this.#intake.replica(op, generation),
      nextSeq: () => this.#intake.seq,
      whereIs: (id) => this.#intake.whereIs(id),
      requeuedMirrored: (id, deliveries, at) => this.#intake.requeuedMirrored(id, deliveries, at),
      forgetAcceptedIds: () => this.#intake.forgetAcceptedIds(),
      // Paged messages the master removed: read on past the budget to reach them (Pager.starving()).
      removalsWaiting: () => {
        for (const queue of this.queues.values()) if (queue.backlog.count > 0) this.#pager?.starving(queue);
      },
    });
    registerClusterGauges(this.stats, this.cluster);
    this.#intake = new Intake({
      store: this.store,
      cluster: this.cluster,
      log: this.log,
      counters: this.stats.counters,
      queues: () => this.queues.values(),
      queue: (name) => this.queue(name),
      pager: () => this.#pager,
      incoming: (queue) => this.moves.incomingMirror(queue),
    });
    this.#pager = canPage(this.store)
      ? new Pager(this.store, {
        log: this.log,
        queue: (name) => this.queue(name),
        admit: (queue, record, recovered) => this.#intake.admit(queue, record, recovered),
        flush: () => this.flush(),
        get shuttingDown() {
          return broker.shuttingDown;
        },
        collect: () => collectAfterPaging(),
      })
      : null;
    this.disk = this.store ? new DiskFloor(config.dataDirectory, () => this.config.minFreeDiskBytes, this.now) : null;
    this.moves = new Moves(this);
    const routes = this.#routes;
    const intake = this.#intake;
    this.#admission = {
      get stopping() {
        return broker.stopping;
      },
      get isMaster() {
        return broker.isMaster;
      },
      get rules() {
        return broker.rules;
      },
      routes,
      placement: this.placement,
      intake,
      cluster: this.cluster,
      disk: this.disk,
      store: this.store,
      moves: this.moves,
      now: () => this.now(),
    };
  }

  get config(): Config {
    return this.#config;
  }

  /** The compiled rules in force. */
  get rules(): Rules {
    return this.#rules;
  }

  /** Pinned public keys of clients (`registeredClientsPath`). */
  get registry(): KeyRegistry {
    return this.#auth.clients;
  }

  /** The open connections (clients and peers), for reading. */
  get sessions(): ReadonlySet<Peer> {
    return this.#sessions;
  }

  /** True after soft-stop started: new connections and sends are refused. */
  get stopping(): boolean {
    return this.#stopping;
  }

  /** True while the server closes every connection to stop: their deliveries are not failures. */
  get shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  /** A connection opened: it counts against `maxConnections` and hears role announcements. */
  attach(peer: Peer): void {
    this.#sessions.add(peer);
  }

  /** A connection is gone. */
  detach(peer: Peer): void {
    this.#sessions.delete(peer);
    this.#dirty.delete(peer);
  }

  /** A connection has frames to write: written at the next `flush()`, once per burst. */
  markDirty(peer: Peer): void {
    this.#dirty.add(peer);
  }

  /**
   * Soft-stop begins: new connections and sends are refused, and every client is told so (it
   * keeps its sends for the next broker it reaches).
   */
  stopAccepting(): void {
    if (this.#stopping) return;
    this.#stopping = true;
    for (const session of this.#sessions) session.announceStopping();
    this.flush();
  }

  /** The server is closing every connection to stop: their in-flight copies stay stored as they are. */
  beginShutdown(): void {
    this.#shuttingDown = true;
  }

  /** Counts acks and nacks settled by clients. */
  countAcked(count: number): void {
    this.stats.counters.acked += count;
  }

  /** Counts a delivery written to a client, and samples its send-to-deliver latency. */
  countDelivered(copy: Copy): void {
    const stats = this.stats;
    stats.counters.sent++;
    if (copy.deliveries === 1 && stats.deliverSampler.hit()) stats.sendDeliver.observe((this.now() - copy.message.created) / 1000);
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
    for (const session of this.#sessions) session.announceRole();
    if (this.isMaster) for (const session of this.#sessions) session.pumpAll();
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
    this.#config = config;
    this.#rules = rules;
    this.#schemas = schemas;
    this.#routes.clear(); // routes cache each queue's schema
    this.#auth.reload(config.registeredClientsPath);
    this.log.minLevel = config.logLevel;
    for (const queue of this.queues.values()) queue.settings = channelSettings(config, queue.name);
    this.log.info("broker", `reloaded;queues=${this.queues.size}`);
    this.cluster.applyReload(previous, promotedEpoch, options.force === true);
    this.placement.placeConfigured();
  }

  /** Queues placed or moved: routes are looked up again, and clients that follow the map are told. */
  #mapChanged(queues: string[]): void {
    this.#routes.clear();
    for (const session of this.#sessions) session.announceMap(queues);
    for (const queue of queues) this.moves.reconcile(queue);
    this.flush();
  }

  /** What a queue move streams first: the queue's messages now, in memory, being stored and paged. */
  snapshot(queue: Queue): Snapshot {
    return snapshotOf([queue], [...this.#intake.storing()].filter((message) => message.queue === queue.name), this.store);
  }

  /** True for a broker that may open a peer link: one of `cluster.peers`, or one registered in the queue map's groups. */
  isPeer(serviceId: string): boolean {
    return this.cluster.isPeer(serviceId) || this.placement.isMember(serviceId);
  }

  /**
   * Forgets a queue another group owns (moved away, or a move into this group rolled back): its
   * registrations, every copy (in flight too) and its stored rows. Returns how many copies went.
   */
  dropQueue(name: string): number {
    const queue = this.queues.get(name);
    if (!queue) return 0;
    for (const handler of queue.handlers()) queue.unsubscribe(handler);
    const dropped = queue.purge() + this.purgePaged(queue);
    this.queues.delete(name);
    this.#routes.clear();
    return dropped;
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
        onDead: (copy, reason) => this.#deadLetters.dead(queue!, copy, reason),
        onDelivered: (copy) => {
          this.#intake.storeFor(queue!)?.noteDelivery(copy.message.record ?? copy.message, copy.deliveries);
        },
        onTakenBack: (copy, at) => this.#intake.takenBack(queue!, copy, at),
        onSettled: (message) => {
          this.store?.remove(message.record ?? message);
          this.cluster.mirror.forget(message);
          if (this.isMaster) this.cluster.replication.remove(message.id);
          if (this.moves.outgoing.size > 0) this.moves.settled(message);
          if (queue!.backlog.count > 0) this.#pager?.settled(queue!);
        },
        onStarving: () => this.#pager?.starving(queue!),
      });
      queue.mirroring = !this.isMaster; // a slave holds everything until acked or promoted
      this.queues.set(name, queue);
    }
    return queue;
  }

  /** Takes a message (admission.ts); throws a KittenError when it is refused. */
  send(channelName: string, messageId: string, body: Uint8Array, sender: Sender): void | Promise<void> {
    return admit(this.#admission, channelName, messageId, body, sender);
  }

  /** A message a queue move streams in (admission.ts, admitMoved). */
  acceptMoved(append: AppendOp, delayMs = 0, mayBeHeld = false): void | Promise<void> {
    return admitMoved(this.#admission, this.queue(append[3]), append, delayMs, mayBeHeld);
  }

  /**
   * At start, before the port opens: every message the store kept comes back. A store that pages
   * leaves them on disk and each queue reads one page (a restart does not load the backlog);
   * another store's messages are all restored.
   */
  recover(): void {
    this.#intake.recover();
  }

  /**
   * Deletes a queue's paged messages (of one destination id, or all) from the store: what an
   * operator's purge of the queue must remove besides the copies in memory. Returns how many.
   */
  purgePaged(queue: Queue, destination?: string): number {
    return this.#pager?.purge(queue, destination) ?? 0;
  }

  /** A queue's share of the store (rows and estimated bytes); zeros without a store that tracks it. */
  diskUsage(queueName: string): QueueUsage {
    return canPage(this.store) ? this.store.queueUsage(queueName) : { messages: 0, bytes: 0 };
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
    this.store?.reclaim?.();
    for (const queue of this.queues.values()) if (queue.hasTimers) queue.tick(now);
    this.cluster.tick();
    this.flush();
  }

  /**
   * Quiet after a burst: durable queues nobody receives from leave their messages in the store
   * only (Pager.releaseIdle()), except queues being moved (the move streams what is in memory).
   */
  releaseIdleQueues(): number {
    let released = 0;
    for (const queue of this.queues.values()) {
      if (this.moves.outgoing.has(queue.name) || this.moves.incomingMirror(queue.name) !== null) continue;
      released += this.#pager?.releaseIdle(queue) ?? 0;
    }
    return released;
  }

  /** Writes every session's pending frames: one socket write per session per burst. */
  flush(): void {
    if (this.isMaster) this.cluster.replication.flush();
    // A flush may let a paused session take more deliveries, which makes it dirty again.
    while (this.#dirty.size > 0) {
      const sessions = [...this.#dirty];
      this.#dirty.clear();
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
    await this.#auth.authenticate(this.#config, this.#rules, clientId, nonce, proof, peer);
  }
}
