/**
 * The broker's place among several brokers: its role and epoch, fencing of old masters, the
 * replication stream it serves as master (replication.ts), the link it keeps to the master as a
 * slave (upstream.ts), what it mirrors as a slave (mirror.ts), and, with `cluster.etcd`, the
 * election that makes it master (election.ts). The broker routes messages and asks this module
 * whether it may deliver and confirm, and tells it what it accepted and settled.
 *
 * Manual mode (no `cluster.etcd`): `isMaster` in the config says the role; a promotion (reload
 * with `isMaster: true`) raises the epoch, and is refused while this broker is not in sync with a
 * master (`reload --force` overrides: it may lose messages). Automatic mode: etcd elects the
 * master among in-sync brokers and issues the epoch.
 */
import { KittenError, parseHost } from "../../protocol/mod.ts";
import type { AppendOp, PeerPosition } from "../../protocol/peer_ops.ts";
import type { Config } from "../config/config.ts";
import type { Logger } from "../log.ts";
import type { Queue } from "../queue/queue.ts";
import type { Store } from "../store/store.ts";
import { delaysInForce } from "./requeue_notices.ts";
import { Mirror } from "./mirror.ts";
import { LogPositions } from "./log_positions.ts";
import { Replication, type ReplicaStatus } from "./replication.ts";
import type { ReplicaLink, Snapshot } from "./replica.ts";
import { Upstream } from "./upstream.ts";
import type { UpstreamStatus } from "./upstream_target.ts";
import type { Election } from "./election.ts";

/** What the cluster module needs of the broker. */
export interface ClusterHost {
  readonly config: Config;
  readonly store: Store | null;
  readonly queues: Map<string, Queue>;
  readonly log: Logger;
  now(): number;
  /** Every client is told the role; a new master starts delivering. */
  announceRole(): void;
  /** Every message held (being stored, and paged, included): a replica's snapshot. */
  snapshot(): Snapshot;
  /** Stores and queues a replicated message (a slave). */
  acceptReplica(op: AppendOp, generation: number): void | Promise<void>;
  nextSeq(): number;
  /**
   * Where a message this slave does not hold in memory is: being stored ("storing"), or held in
   * the store only ("paged"); null when it is not here at all (settled already, by a mirrored ack).
   */
  whereIs(id: string): "storing" | "paged" | null;
  /**
   * Removals wait for paged messages: they come back to memory only as memory frees up, and a
   * slave's memory may be full of messages nobody on the master consumes yet.
   */
  removalsWaiting(): void;
  /** The master requeued a message delivered `deliveries` times, due again at `at` (0: at once): here too. */
  requeuedMirrored(messageId: string, deliveries: number, at: number): void;
  /**
   * Messages this broker accepted were dropped because its master does not hold them: an id
   * accepted before no longer proves the message is held anywhere (a resend must be stored).
   */
  forgetAcceptedIds(): void;
}

export interface ClusterStatus {
  mode: "single" | "manual" | "etcd";
  /** `cluster.group`: the brokers that elect one master among them. */
  group: string;
  role: "master" | "slave";
  epoch: number;
  fencedBy: { epoch: number; master: string } | null;
  minInSyncReplicas: number;
  /** The in-sync set, the master first (on a master). */
  inSync: string[];
  replicas: ReplicaStatus[];
  upstream: UpstreamStatus | null;
  leader: { id: string; epoch: number } | null;
  /**
   * The replication log here: its last index, the bytes of newest entries kept (what slaves
   * catch up from), and, as master, the catch-ups served from a position and the full snapshots.
   */
  log: { index: number; retainedFrom: number; retainedBytes: number; positionCatchUps: number; snapshotsSent: number };
}

export class Cluster {
  epoch = 0;
  /** Set when a client or peer reported a newer master (see fence()). */
  fencedBy: { epoch: number; master: string } | null = null;
  readonly mirror: Mirror;
  readonly replication: Replication;
  readonly upstream: Upstream;
  /** Where this broker's replication log stands: its epochs, its newest entries, what is on disk. */
  readonly positions: LogPositions;
  #seenEpoch = 0;
  #election: Election | null = null;
  /** The election module loading (etcd3 is loaded only by brokers that use it: it takes ~300 ms). */
  #electionLoading: Promise<void> | null = null;
  #stopped = false;
  /** In automatic mode: whether etcd says this broker leads (and its lease is fresh). */
  #elected = false;

  constructor(readonly host: ClusterHost) {
    this.mirror = new Mirror(host.queues);
    this.epoch = this.#storedEpoch("epoch");
    this.#seenEpoch = this.#storedEpoch("seenEpoch");
    const log = (level: "info" | "warn" | "error", message: string) => host.log[level]("cluster", message);
    this.positions = new LogPositions(host.store, log);
    const { history, tail } = this.positions;
    this.replication = new Replication({
      minInSyncReplicas: () => host.config.cluster.minInSyncReplicas,
      maxLagMs: () => host.config.cluster.maxLagMs,
      epoch: () => this.epoch,
      now: () => host.now(),
      log,
      self: () => host.config.serviceId,
      uncertainAfter: () => this.positions.uncertainAfter,
      publishIsr: (members) => this.#election?.publishIsr(members),
      delaysInForce: () => delaysInForce(host.queues.values(), host.now()),
      history,
      tail,
      keepsLog: () => this.replicates,
    });
    const cluster = this;
    this.upstream = new Upstream({
      get serviceId() {
        return host.config.serviceId;
      },
      get peers() {
        return host.config.cluster.peers;
      },
      get keysDirectory() {
        return host.config.keysDirectory;
      },
      get keysName() {
        return host.config.keysName;
      },
      get maxFrameSize() {
        return host.config.socketServer.maxFrameSize;
      },
      epoch: () => Math.max(this.epoch, this.#seenEpoch),
      sawEpoch: (epoch, master) => cluster.fence(epoch, master, "peer link"),
      append: (op, generation) => host.acceptReplica(op, generation),
      remove: (ids) => this.#drop(ids),
      requeued: (triples) => {
        const now = host.now();
        for (let i = 0; i < triples.length; i += 3) {
          const msLeft = triples[i + 2] as number;
          host.requeuedMirrored(triples[i] as string, triples[i + 1] as number, msLeft === 0 ? 0 : now + msLeft);
        }
      },
      synced: (generation, before, index, epochs) => {
        const dropped = this.mirror.reconcile(generation, before);
        if (dropped > 0) {
          host.forgetAcceptedIds();
          log("info", `dropped ${dropped} messages the master no longer holds`);
        }
        this.positions.restart(index, epochs ?? []);
      },
      position: () => this.positions.position(),
      resumed: (from, epochs) => {
        const undone = this.positions.resume(from, epochs);
        if (undone.length === 0) return;
        host.forgetAcceptedIds();
        this.#drop(undone);
        log("info", `went back to index ${from}: dropped ${undone.length} messages the master does not hold`);
      },
      retain: (index, body) => tail.pushBody(index, body),
      stored: (index) => this.positions.stored(index),
      nextSeq: () => host.nextSeq(),
      log,
    });
  }

  /** Drops messages the master removed (or does not hold): from memory, or when they reach it. */
  #drop(ids: string[]): void {
    let paged = false;
    for (const id of ids) {
      if (this.mirror.removed(id)) continue;
      // Usually settled here already: the client copies its acks to the slaves, ahead of the
      // master's removal. Only a message still on its way to memory waits for it.
      const where = this.host.whereIs(id);
      if (where === null) continue;
      this.mirror.removeLater(id);
      paged ||= where === "paged";
    }
    if (paged) this.host.removalsWaiting();
  }

  get automatic(): boolean {
    return this.host.config.cluster.etcd !== null;
  }

  /** Master and not fenced: only then does the broker deliver and confirm sends as master. */
  get isMaster(): boolean {
    const configured = this.automatic ? this.#elected : this.host.config.isMaster;
    return configured && this.fencedBy === null;
  }

  get role(): "master" | "slave" {
    return this.isMaster ? "master" : "slave";
  }

  /** Starts the roles' machinery: a slave's link to its master, or the election. */
  start(): void {
    if (!this.isMaster) this.mirror.start();
    else {
      if (!this.automatic) this.#raiseEpochAfterCrash();
      this.replication.begin(this.epoch, this.positions.lastIndex);
      this.positions.committedIndex = this.replication.index; // loaded from the store
    }
    if (this.automatic) {
      if (this.host.config.isMaster) {
        this.host.log.warn("cluster", "isMaster is ignored: cluster.etcd elects the master");
      }
      this.#startElection();
    }
    if (!this.isMaster) this.upstream.start();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    // A restart goes on from here (a kill -9 from the last periodic save).
    this.positions.saveAtStop(this.#restartIndex);
    this.upstream.stop();
    this.replication.reset("the broker is stopping");
    await this.#electionLoading;
    await this.#election?.stop();
  }

  /** Soft-stop: a leader gives its place up before it goes. */
  async resign(): Promise<void> {
    if (this.#election?.isLeader) await this.#election.resign();
  }

  /**
   * A client or peer has seen a master with a higher epoch: this broker is an old master that
   * came back without being demoted. It stops delivering (and says why) until it is demoted or
   * promoted again.
   */
  fence(epoch: number, master: string, by: string): void {
    if (epoch > this.#seenEpoch) {
      this.#seenEpoch = epoch;
      this.host.store?.setMeta("seenEpoch", epoch);
      this.upstream.newerEpoch(epoch);
      // Clients name the new master by its host string (`host:port@serviceId`): a slave dials it now.
      if (!this.isMaster) this.upstream.preferMaster(serviceIdOf(master));
    }
    if (!this.isMaster || epoch <= this.epoch || this.fencedBy !== null) return;
    this.fencedBy = { epoch, master };
    this.host.log.error(
      "cluster",
      `fenced: ${by} sees master "${master}" with epoch ${epoch}, newer than this broker's epoch ` +
        `${this.epoch}; deliveries stop until this broker is demoted (isMaster false) or promoted again`,
    );
    this.#becameSlave("fenced, now a slave");
  }

  /**
   * Checks a reload's role change before anything is applied: a promotion of a slave that is not
   * in sync is refused unless forced. Returns the epoch a promotion takes (written to the store
   * by `applyReload`), or null for no promotion.
   */
  checkReload(next: Config, force: boolean): number | null {
    if (next.cluster.etcd !== null) return null; // etcd decides
    const promoted = next.isMaster && (!this.host.config.isMaster || this.fencedBy !== null || this.automatic);
    if (!promoted) return null;
    const hasPeers = next.cluster.peers.length > 0;
    if (hasPeers && !this.upstream.inSync && !this.isMaster && !force) {
      throw new KittenError(
        "NOT_IN_SYNC",
        `Cannot promote "${next.serviceId}" to master: ${this.upstream.describe()}; promoting it now may lose ` +
          `confirmed messages (kitten-mq reload --force does it anyway)`,
        this.upstream.status(),
      );
    }
    return Math.max(this.epoch, this.#seenEpoch) + 1;
  }

  /** Applies a checked reload: the new config is already in place. */
  applyReload(previous: Config, promotedEpoch: number | null, force: boolean): void {
    const wasMaster = previous.cluster.etcd !== null ? this.#elected && this.fencedBy === null : previous.isMaster && this.fencedBy === null;
    if (promotedEpoch !== null) {
      this.host.store?.setMeta("epoch", promotedEpoch);
      this.epoch = promotedEpoch;
      this.fencedBy = null;
      if (force && !this.upstream.inSync) {
        this.host.log.warn("cluster", `promotion forced while ${this.upstream.describe()}: messages may be lost`);
      }
      return this.#becameMaster("promoted to master");
    }
    if (wasMaster && !this.isMaster) return this.#becameSlave("demoted to slave");
    // Clients copy their sends and acks to a slave that takes no stream: tell them when that changed.
    if ((previous.cluster.peers.length > 0) !== this.replicates) this.host.announceRole();
    if (!this.isMaster) this.upstream.start(); // cluster.peers may have been added
  }

  /**
   * A master restarted after a kill -9 goes on from an index older than the log it wrote: the
   * entries it writes next must not share an epoch with those a slave may hold after that index,
   * or their logs would seem to agree where they differ. Elected masters get a new epoch from etcd;
   * one set by isMaster raises its own, as a promotion does.
   */
  #raiseEpochAfterCrash(): void {
    const after = this.positions.uncertainAfter;
    if (after === null || this.positions.history.epochs.length === 0) return;
    const epoch = Math.max(this.epoch, this.#seenEpoch) + 1;
    try {
      this.host.store?.setMeta("epoch", epoch);
    } catch (error) {
      // A full disk at start: the broker runs (it serves what it holds); the next start raises again.
      this.host.log.error("cluster", `cannot save epoch ${epoch}: ${(error as Error).message}`);
    }
    this.epoch = epoch;
    this.host.log.warn(
      "cluster",
      `the last run did not stop cleanly: the log after index ${after} is unknown, so it goes on in epoch ${epoch}; ` +
        `a slave that holds entries after index ${after} gets a snapshot`,
    );
  }

  #becameMaster(why: string): void {
    this.upstream.applyRemovals();
    this.upstream.stop();
    this.mirror.stop();
    this.replication.begin(this.epoch, this.positions.lastIndex);
    // What it held as a slave is stored: a restart goes on from there, not from 0.
    this.positions.committedIndex = Math.max(this.positions.committedIndex, this.replication.index);
    this.positions.save(this.replication.index);
    this.host.log.info("cluster", `${why};epoch=${this.epoch};delivering every message not acked`);
    this.host.announceRole();
  }

  #becameSlave(why: string): void {
    this.replication.reset(`this broker is no longer master (${why})`);
    this.mirror.start();
    this.host.log.info("cluster", `${why};epoch=${this.epoch}`);
    this.host.announceRole();
    this.upstream.start();
  }

  /** A peer asked for the replication stream. */
  attachReplica(link: ReplicaLink, peerEpoch: number, position: PeerPosition | undefined): void {
    if (!this.isMaster) {
      throw new KittenError("NOT_IN_SYNC", `Cannot replicate to "${link.peerId}": this broker is not master`);
    }
    if (peerEpoch > this.epoch) this.fence(peerEpoch, link.peerId, `peer "${link.peerId}"`);
    if (!this.isMaster) {
      throw new KittenError("NOT_IN_SYNC", `Cannot replicate to "${link.peerId}": a newer master exists`);
    }
    this.replication.attach(link, position, () => this.host.snapshot());
  }

  /**
   * True when this broker takes its master's stream as a slave (`cluster.peers` set): it tells
   * its clients (welcome, ROLE), which then copy their sends and acks to the master only.
   */
  get replicates(): boolean {
    return this.host.config.cluster.peers.length > 0;
  }

  /** True for a serviceId listed in `cluster.peers`. */
  isPeer(serviceId: string): boolean {
    return this.host.config.cluster.peers.some((peer) => parseHost(peer).serviceId === serviceId);
  }

  tick(): void {
    if (this.isMaster) this.replication.tick();
    this.positions.saveSoon(this.#restartIndex, this.host.now());
  }

  /**
   * What a restart may go on from (see LogPositions): as master, the log every in-sync replica
   * holds and this broker's store committed (removals after the last send ask no commit of it:
   * they drop what it settles); as slave, what it acknowledged.
   */
  get #restartIndex(): number {
    if (!this.isMaster) return this.positions.storedIndex;
    const { replication, positions } = this;
    const committed = positions.committedIndex >= replication.lastAppendIndex ? replication.index : positions.committedIndex;
    return Math.min(replication.highWater, committed);
  }

  /** The last index of the replication log this broker holds. */
  get logIndex(): number {
    return this.isMaster ? this.replication.index : this.positions.lastIndex;
  }

  status(): ClusterStatus {
    const config = this.host.config;
    return {
      mode: this.automatic ? "etcd" : config.cluster.peers.length > 0 ? "manual" : "single",
      group: config.cluster.group,
      role: this.role,
      epoch: this.epoch,
      fencedBy: this.fencedBy,
      minInSyncReplicas: config.cluster.minInSyncReplicas,
      inSync: this.isMaster ? this.replication.inSyncMembers() : [],
      replicas: this.isMaster ? this.replication.status() : [],
      upstream: this.isMaster || config.cluster.peers.length === 0 ? null : this.upstream.status(),
      leader: this.#election?.leader ?? null,
      log: {
        index: this.logIndex,
        retainedFrom: this.positions.tail.base + 1,
        retainedBytes: this.positions.tail.bytes,
        positionCatchUps: this.replication.positionCatchUps,
        snapshotsSent: this.replication.snapshotsSent,
      },
    };
  }

  #storedEpoch(key: string): number {
    const stored = this.host.store?.meta(key);
    return typeof stored === "number" ? stored : Number(stored ?? 0) || 0;
  }

  // ── automatic mode ─────────────────────────────────────────────────────────────────────────

  #startElection(): void {
    this.#electionLoading = import("./election.ts").then(
      ({ Election }) => {
        if (!this.#stopped) this.#runElection(Election);
      },
      (error) => this.host.log.error("cluster", `cannot load the etcd client: ${(error as Error).message}`),
    );
  }

  #runElection(Election: typeof import("./election.ts").Election): void {
    const etcd = this.host.config.cluster.etcd!;
    const log = (level: "info" | "warn" | "error", message: string) => this.host.log[level]("cluster", message);
    this.#election = new Election({
      endpoints: etcd.endpoints,
      leaseTtlSeconds: etcd.leaseTtlSeconds,
      prefix: etcd.prefix,
      group: this.host.config.cluster.group,
      candidate: this.host.config.serviceId,
      log,
    }, {
      elected: (epoch) => {
        this.epoch = Math.max(epoch, this.epoch);
        this.host.store?.setMeta("epoch", this.epoch);
        this.#elected = true;
        this.fencedBy = null;
        this.#becameMaster("elected master through etcd");
        // The in-sync set starts as the master alone; replicas join as they catch up.
        this.replication.recordInSyncSet();
      },
      steppedDown: (reason) => {
        if (!this.#elected) return;
        this.#elected = false;
        this.#becameSlave(`stepped down to slave: ${reason}`);
      },
      leader: (current) => {
        if (current && current.id !== this.host.config.serviceId) {
          this.fence(current.epoch, current.id, "etcd");
          this.upstream.preferMaster(current.id);
        }
        if (!current) this.#updateEligibility();
      },
    });
    this.#election.start();
    this.#updateEligibility();
  }

  /**
   * Only a broker that holds every confirmed message stands: one in the in-sync set the last
   * master recorded (any broker, when none was ever recorded).
   */
  #updateEligibility(): void {
    const election = this.#election;
    if (!election) return;
    election.readIsr().then(
      (record) => {
        const me = this.host.config.serviceId;
        const eligible = record === null || record.members.includes(me);
        election.setEligible(eligible);
      },
      (error) => this.host.log.warn("cluster", `cannot read the in-sync set from etcd: ${(error as Error).message}`),
    );
  }

  /** Called about once a second in automatic mode, while no leader is known. */
  checkEligibility(): void {
    if (this.#election && !this.#election.isLeader && this.#election.leader === null) this.#updateEligibility();
  }
}

/** The serviceId a master is named by: a client's host string (`host:port@serviceId`), or the id itself. */
function serviceIdOf(master: string): string {
  try {
    return parseHost(master).serviceId ?? master;
  } catch {
    return master; // a peer or etcd names the master by its serviceId alone
  }
}
