/**
 * Queue moves on this broker (brokers with `cluster.etcd`): asking for one, driving it when this
 * broker is the source group's master (outgoing.ts), taking it in when it is the target's
 * (incoming.ts), and keeping every broker's data in line with the map and the move records:
 *
 * - A move record in state "copying" is driven by the master of its source group elected at the
 *   record's epoch, and by no one else: a source group's master with another epoch (the one that
 *   began it died) rolls it back, and so does any master of the two groups once the record has
 *   made no progress for 30 s. A rolled-back move leaves the queue where it was.
 * - A broker holding a queue that another group owns drops it (registrations, every copy, its
 *   stored rows), unless a move into its own group is copying it: the source after the switch,
 *   the target after a roll-back, and their slaves, each on its own, from what etcd says.
 */
import { KittenError } from "../../protocol/mod.ts";
import type { Config } from "../config/config.ts";
import { Mirror } from "../cluster/mirror.ts";
import type { MoveRecord } from "../cluster/move_records.ts";
import type { QueueMap } from "../cluster/queue_map.ts";
import type { Snapshot } from "../cluster/replica.ts";
import type { Message } from "../queue/message.ts";
import type { Queue } from "../queue/queue.ts";
import type { Logger } from "../log.ts";
import { OutgoingMove } from "./outgoing.ts";
import { TrafficMeter } from "./traffic.ts";

export interface MovesHost {
  readonly config: Config;
  readonly log: Logger;
  readonly isMaster: boolean;
  readonly queues: ReadonlyMap<string, Queue>;
  now(): number;
  /** `map`: the queue map (null before it is loaded, or without etcd). */
  readonly placement: { readonly map: QueueMap | null };
  queue(name: string): Queue;
  snapshot(queue: Queue): Snapshot;
  /** Forgets a queue another group owns: registrations, copies, stored rows. Returns how many messages went. */
  dropQueue(name: string): number;
  /** `checkReplicas` throws NOT_ENOUGH_REPLICAS while fewer brokers are in sync than `cluster.minInSyncReplicas` asks for. */
  readonly cluster: { readonly replication: { checkReplicas(channel: string): void } };
}

/** A copying move with no progress for this long is rolled back. */
export const STALE_MOVE_MS = 30_000;
/** How long a target waits for a move's record to reach it through the watch. */
const RECORD_WAIT_MS = 3_000;
const RECORD_POLL_MS = 20;

export class Moves {
  /** Moves this broker drives, by queue. */
  readonly outgoing = new Map<string, OutgoingMove>();
  /** Queues this broker takes in, by name, with what tracks their messages until the switch. */
  readonly incoming = new Map<string, Mirror>();
  /** Ids of records this broker is rolling back: one transaction each, not one per tick. */
  readonly #rollingBack = new Set<string>();
  /** Sends of clients taken here (a move's own messages are not counted: they are not client traffic). */
  clientSends = 0;
  /** The clients' traffic a move leaves room for (sampled by the broker's tick). */
  readonly traffic: TrafficMeter;

  constructor(readonly host: MovesHost) {
    this.traffic = new TrafficMeter(() => this.clientSends);
  }

  get #group(): string {
    return this.host.config.cluster.group;
  }

  /** Records a move of `queue` to group `to`; the source group's master runs it. Throws MOVE_REFUSED. */
  async request(queue: string, to: string): Promise<MoveRecord> {
    const map = this.host.placement.map;
    if (!map) {
      throw new KittenError("MOVE_REFUSED", `Cannot move queue "${queue}": this broker spreads no queues over groups (no cluster.etcd), or has not read the map yet`);
    }
    return await map.requestMove(queue, to, this.host.config.serviceId, this.host.now());
  }

  /** Every queue's move record, newest first. */
  status(): MoveRecord[] {
    return (this.host.placement.map?.moves() ?? []).sort((a, b) => b.requestedAt - a.requestedAt);
  }

  /** True when sends to `queue` are held for a switch. */
  fenced(queue: string): boolean {
    return this.outgoing.get(queue)?.fenced === true;
  }

  /** A queue took a message (admission): a move of it streams it. */
  appended(message: Message): void {
    this.outgoing.get(message.queue)?.appended(message);
  }

  /** A message settled: a move of its queue drops it on the target too. */
  settled(message: Message): void {
    this.outgoing.get(message.queue)?.settled(message);
  }

  /** The tracker of a queue being moved in (intake tracks its messages with it), or null. */
  incomingMirror(queue: string): Mirror | null {
    return this.incoming.size === 0 ? null : this.incoming.get(queue) ?? null;
  }

  /**
   * MOVE_BEGIN on this broker: opens `queue` for the move `id` once etcd's record says so. With
   * `resume` (the source links again after its link to this group's master ended), what this
   * broker holds of the queue stays: as master before, or as the slave of the master that took
   * the move (elected in its place), it holds every message the source saw acknowledged.
   */
  async begin(queue: string, id: string, resume = false): Promise<Mirror> {
    const refuse = (why: string) => new KittenError("MOVE_REFUSED", `Cannot take queue "${queue}" in: ${why}`);
    const record = await this.#recordOf(queue, id);
    if (!record) throw refuse(`no move ${id} of it is recorded in etcd`);
    if (record.state !== "copying" || record.to !== this.#group) throw refuse(`move ${id} is ${record.state}, to group "${record.to}"`);
    if (!this.host.isMaster) throw refuse(`this broker is not the master of group "${this.#group}"`);
    // A group that cannot store what the source streams says so now, before the source writes
    // (again) what it holds unacknowledged: the source asks again shortly (target_link.ts).
    this.host.cluster.replication.checkReplicas(queue);
    const held = this.host.queues.has(queue) && !this.incoming.has(queue);
    // What an earlier, rolled-back attempt left here goes first.
    if (held && !resume) this.host.dropQueue(queue);
    const target = this.host.queue(queue);
    let mirror = this.incoming.get(queue);
    const taking = mirror !== undefined;
    if (!mirror) {
      mirror = new Mirror(new Map([[queue, target]]));
      // Held whole, no ttl nor overflow, until the switch; what this broker held as a slave is
      // tracked by id from now on, so that the source's removals find it.
      if (held && resume) mirror.start();
      else target.mirroring = true;
      this.incoming.set(queue, mirror);
    }
    const kept = taking ? "keeping what it took so far" : held ? "keeping the messages it held as a slave" : "holding none of them";
    const how = resume ? `again (${kept})` : "";
    this.host.log.info("move", `queue=${queue};taking it in from group "${record.from}" (move ${id})${how ? ` ${how}` : ""}`);
    return mirror;
  }

  /** The record of move `id` of `queue`, once the watch brought it (a target may hear of it after the source). */
  async #recordOf(queue: string, id: string): Promise<MoveRecord | undefined> {
    const deadline = this.host.now() + RECORD_WAIT_MS;
    for (;;) {
      const record = this.host.placement.map?.move(queue);
      if (record?.id === id) return record;
      if (this.host.now() >= deadline) return undefined;
      await new Promise((resolve) => setTimeout(resolve, RECORD_POLL_MS));
    }
  }

  /** Move records changed (the watch, or this broker's own writes). */
  recordsChanged(records: readonly MoveRecord[]): void {
    for (const record of records) {
      if (record.state === "copying") this.#copying(record);
      else {
        const running = this.outgoing.get(record.queue);
        if (running && running.id === record.id && record.state === "rolled-back") running.abandon();
      }
      this.reconcile(record.queue);
    }
  }

  #copying(record: MoveRecord): void {
    const map = this.host.placement.map;
    if (!map || !this.host.isMaster || record.from !== this.#group) return;
    const running = this.outgoing.get(record.queue);
    if (running?.id === record.id) return;
    const leader = map.leader(this.#group);
    if (leader?.serviceId !== this.host.config.serviceId) return;
    if (leader.epoch !== record.sourceEpoch) {
      this.#rollback(map, record, `the master of group "${record.from}" changed (epoch ${leader.epoch}; the move began at ${record.sourceEpoch})`);
      return;
    }
    const queue = this.host.queues.get(record.queue) ?? this.host.queue(record.queue);
    const host = this.host;
    const config = host.config;
    const move = new OutgoingMove({
      serviceId: config.serviceId,
      keysDirectory: config.keysDirectory,
      keysName: config.keysName,
      maxFrameSize: config.socketServer.maxFrameSize,
      get bytesPerSecond() {
        return host.config.cluster.moveBytesPerSecond; // a reload applies to a move in progress
      },
      map,
      traffic: this.traffic,
      now: () => this.host.now(),
      log: (level, message) => this.host.log[level]("move", message),
      snapshot: (moved) => this.host.snapshot(moved),
      ended: (ended) => {
        if (this.outgoing.get(record.queue) !== ended) return;
        this.outgoing.delete(record.queue);
        // After a switch the map may have said so already, while the move still ran: drop it now.
        this.reconcile(record.queue);
      },
    }, queue, record);
    this.outgoing.set(record.queue, move);
    move.start();
  }

  #rollback(map: QueueMap, record: MoveRecord, reason: string): void {
    if (this.#rollingBack.has(record.id)) return;
    this.#rollingBack.add(record.id);
    this.host.log.warn("move", `queue=${record.queue};rolling back move ${record.id}: ${reason}`);
    map.updateMove(record, { state: "rolled-back", reason, finishedAt: this.host.now(), updatedAt: this.host.now() })
      .catch((error: Error) => this.host.log.warn("move", `queue=${record.queue};cannot roll back: ${error.message}`))
      .finally(() => this.#rollingBack.delete(record.id));
  }


  /**
   * Keeps this broker's copy of `queue` in line with the map: a queue taken in becomes an ordinary
   * one once its group owns it; one another group owns is dropped unless it is being moved here.
   */
  reconcile(queue: string): void {
    const map = this.host.placement.map;
    if (!map || !this.host.queues.has(queue)) return;
    const owner = map.owner(queue);
    if (!owner) return;
    const record = map.move(queue);
    if (owner.group === this.#group) {
      const mirror = this.incoming.get(queue);
      if (mirror && record?.state !== "copying") this.#finishIncoming(queue, mirror);
      return;
    }
    if (record?.to === this.#group) {
      if (record.state === "copying") return; // being moved here
      // The switch wrote the record and the map entry in one transaction, but they come through two
      // watches: a map entry older than the record is the one before the switch.
      if (record.state === "done" && owner.epoch < record.revision) return;
    }
    const running = this.outgoing.get(queue);
    if (running) return; // still the source: it switches or rolls back first
    this.incoming.delete(queue);
    const dropped = this.host.dropQueue(queue);
    this.host.log.info("move", `queue=${queue};group "${owner.group}" owns it: dropped ${dropped} messages held here`);
  }

  /** The switch gave this group the queue: its messages become ordinary ones, delivered from now on. */
  #finishIncoming(queue: string, mirror: Mirror): void {
    this.incoming.delete(queue);
    const waiting = mirror.earlyRemovals;
    mirror.stop(); // no longer mirroring: ttl, overflow and deliveries apply
    this.host.log.info("move", `queue=${queue};now served here` + (waiting > 0 ? `;${waiting} removals of paged messages not applied (delivered again)` : ""));
  }

  /**
   * About once a second: progress of the moves driven here, moves of this group's queues to run
   * or roll back (a broker elected after the leader key's change was seen), and copying moves
   * stuck for 30 s.
   */
  tick(now: number): void {
    for (const move of [...this.outgoing.values()]) move.tick(now);
    const map = this.host.placement.map;
    if (!map || !this.host.isMaster) return;
    for (const record of map.moves()) {
      if (record.state === "copying" && record.from === this.#group) this.#copying(record);
      if (record.state !== "copying" || now - record.updatedAt < STALE_MOVE_MS) continue;
      if (record.from !== this.#group && record.to !== this.#group) continue;
      const running = this.outgoing.get(record.queue);
      if (running?.id === record.id) {
        running.rollback(`no progress for ${STALE_MOVE_MS / 1000} s`);
        continue;
      }
      this.#rollback(map, record, `no progress for ${STALE_MOVE_MS / 1000} s`);
    }
  }

  /** The broker stops (or is demoted): moves it drives are rolled back. */
  async stop(reason: string): Promise<void> {
    await Promise.all([...this.outgoing.values()].map((move) => move.rollback(reason)));
  }
}
