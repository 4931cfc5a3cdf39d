/**
 * The master's side of replication: the log of what it accepted and settled, the replicas it
 * streams that log to, which of them are in sync, and when a send may be confirmed.
 *
 * Confirmation follows Kafka's rule. With `minInSyncReplicas` N = 1 the master confirms alone, as
 * a lone broker does. With N ≥ 2 a message is confirmed once every in-sync replica has stored it,
 * and only while at least N − 1 replicas are in sync: so any in-sync slave holds every confirmed
 * message, and promoting one loses nothing. A replica that acknowledges nothing for `maxLagMs`
 * drops out of sync (and the master stops waiting for it); it comes back once it has caught up.
 */
import { encode, frame, KittenError, OP } from "../../protocol/mod.ts";
import { ConfirmWaiters } from "./confirm_waiters.ts";
import { RequeueNotices, REQUEUES_PER_FRAME } from "./requeue_notices.ts";
import { InSyncRecord, type PublishInSyncSet } from "./in_sync_record.ts";
import type { Message } from "../queue/message.ts";
import type { PeerPosition } from "../../protocol/peer_ops.ts";
import { commonPrefix, type EpochHistory } from "./history.ts";
import type { LogTail } from "./log_tail.ts";
import { appendFrameView } from "../../protocol/hot_ops.ts";
import {
  positionCatchUp,
  removeFrame,
  Replica,
  type ReplicaLink,
  type Snapshot,
  snapshotCatchUp,
} from "./replica.ts";

export interface ReplicationOptions {
  minInSyncReplicas: () => number;
  maxLagMs: () => number;
  epoch: () => number;
  now: () => number;
  log: (level: "info" | "warn" | "error", message: string) => void;
  /**
   * Records the in-sync set (the master included) where an election can read it; confirmations
   * wait while it is being written, so a slave that dropped out is never elected over them.
   */
  publishIsr?: PublishInSyncSet;
  /** This broker's serviceId, first member of the in-sync set. */
  self: () => string;
  /** Bytes of live entries a replica may have waiting before its link is cut (default 256 MiB). */
  maxQueuedBytes?: number;
  /** The epochs of the log this broker holds (shared with its slave side, upstream.ts). */
  history: EpochHistory;
  /** The newest entries of that log (shared with its slave side). */
  tail: LogTail;
  /** True when the log is kept even with no replica attached (cluster.peers is set). */
  keepsLog: () => boolean;
  /** After a start that did not follow a clean stop: the saved index, past which this log is unknown (log_positions.ts). */
  uncertainAfter?: () => number | null;
  /** The REQUEUED frames of the delays in force, for a replica that attaches (requeue_notices.ts). */
  delaysInForce?: () => Iterable<Uint8Array>;
}

export interface ReplicaStatus {
  peer: string;
  state: "catching-up" | "in-sync" | "lagging";
  ackedIndex: number;
  lagEntries: number;
  lagMs: number;
  snapshotLeft: number;
  /** How it caught up: from its position, or from a snapshot. */
  catchUp: "position" | "snapshot";
  /** Bytes of log entries queued to it and not acknowledged yet. */
  lagBytes: number;
  /** Bytes written to it since it attached, and those of its catch-up alone. */
  bytesSent: number;
  catchUpBytes: number;
}

/** Bytes of live entries a replica may have waiting before its link is cut (it then catches up afresh). */
const MAX_QUEUED_BYTES = 256 * 1024 * 1024;
/** How often, at most, the confirmed index is told while it moves (ms). */
const CONFIRMED_EVERY_MS = 5;

export class Replication {
  /** The last log index used. */
  #index = 0;
  /** The index of the last APPEND (removals may follow it). */
  #lastAppend = 0;
  readonly #replicas = new Map<ReplicaLink, Replica>();
  readonly #waiters = new ConfirmWaiters();
  /** Highest log index confirmed with replicas (a joining replica must hold at least that). */
  #confirmed = 0;
  #removals: string[] = [];
  readonly #requeues = new RequeueNotices();
  readonly #record: InSyncRecord;
  /** Replicas that may have entries waiting for their socket (0: flush() has nothing to do). */
  #waiting = 0;
  /** The confirmed index last told to the replicas (CONFIRMED). */
  #toldConfirmed = -1;
  #toldAt = 0;
  /** Full snapshots sent since this broker started, and catch-ups from a position. */
  snapshotsSent = 0;
  positionCatchUps = 0;

  constructor(readonly options: ReplicationOptions) {
    this.#record = new InSyncRecord(options.publishIsr, (message) => options.log("error", message), (members) => {
      this.#tellRecorded(members);
      this.#advance();
    });
  }

  get index(): number {
    return this.#index;
  }

  get lastAppendIndex(): number {
    return this.#lastAppend;
  }

  /**
   * This broker becomes master in `epoch`: its log goes on from the last index it holds, and the
   * epoch's entries start after it.
   */
  begin(epoch: number, lastIndex: number): void {
    this.#index = Math.max(lastIndex, this.options.tail.last);
    this.#lastAppend = this.#index;
    if (this.options.tail.last !== this.#index) this.options.tail.reset(this.#index);
    const history = this.options.history;
    if (history.epochs.length === 0 || history.lastEpoch !== epoch) history.begin(epoch, this.#index + 1);
    this.#toldConfirmed = -1;
  }

  /**
   * The index every in-sync replica holds the log up to (this broker's own end when none is in
   * sync). A slave applies removals only up to it: then whichever in-sync slave is elected next
   * holds every removal a slave applied, and going back to where two logs part never has to bring
   * back a removed message.
   */
  get highWater(): number {
    let upTo = this.#index;
    for (const replica of this.#replicas.values()) if (replica.state === "in-sync") upTo = Math.min(upTo, replica.acked);
    return upTo;
  }

  /**
   * A slave asked for the stream: it gets the entries after where its log and this one part when
   * this master still holds them (its `position`), else `snapshot()` (every message held); then
   * the live log.
   */
  attach(link: ReplicaLink, position: PeerPosition | undefined, snapshot: () => Snapshot): void {
    for (const [other, replica] of this.#replicas) {
      // A slave that reconnects before its old link timed out: the old one is finished.
      if (replica.id === link.peerId) this.detach(other);
    }
    this.#flushRemovals();
    const bound = this.options.maxQueuedBytes ?? MAX_QUEUED_BYTES;
    const { history, tail } = this.options;
    const plan = this.#plan(position);
    let replica: Replica;
    if (typeof plan === "number") {
      const entries = tail.framesAfter(plan);
      replica = new Replica(link, positionCatchUp(plan, this.#index, entries, history.epochs), bound, this.options.now());
      this.positionCatchUps++;
      this.options.log(
        "info",
        `peer=${link.peerId};catching up from index ${plan};entries=${entries.length};bytes=${tail.bytesAfter(plan)};index=${this.#index}`,
      );
    } else {
      const taken = snapshot();
      replica = new Replica(link, snapshotCatchUp(taken, this.#index, history.epochs), bound, this.options.now());
      this.snapshotsSent++;
      this.options.log("info", `peer=${link.peerId};catching up;snapshot=${taken.count} messages;index=${this.#index};because ${plan}`);
    }
    this.#replicas.set(link, replica);
    // Written after its catch-up; a replica that cannot take them all is cut off, and attaches again.
    for (const bytes of this.options.delaysInForce?.() ?? []) if (!replica.notice(bytes)) return;
    this.#pump(replica);
  }

  /** Where a slave at `position` catches up from: the index its log goes back to, or why it needs a snapshot. */
  #plan(position: PeerPosition | undefined): number | string {
    if (position === undefined) return "it holds no position (a new store, a memory-only broker, or an older version)";
    const { history, tail } = this.options;
    const from = commonPrefix(history, this.#index, position.history, position.index);
    if (from === null) {
      return `its history (epochs ${position.history.map(([epoch]) => epoch).join(", ") || "none"}) shares no epoch with this master's`;
    }
    const uncertain = this.options.uncertainAfter?.() ?? null;
    if (uncertain !== null && from === uncertain && position.index > from) {
      // Undoing its entries after `from` would drop messages this master may still hold.
      return `this master restarted after a run that did not stop cleanly (kill -9?): it cannot tell which of the ` +
        `slave's entries after index ${from} (up to ${position.index}) its store holds`;
    }
    if (from < position.floor) {
      return `it holds entries up to index ${position.index} that this master does not have after index ${from}, ` +
        `and can go back to index ${position.floor} only`;
    }
    if (!tail.holdsAfter(from)) {
      return `this master keeps the log after index ${tail.base} only, and the slave is at index ${from}`;
    }
    return from;
  }

  /** The link closed. */
  detach(link: ReplicaLink): void {
    const replica = this.#replicas.get(link);
    if (!replica) return;
    this.#replicas.delete(link);
    if (replica.state === "in-sync") {
      this.options.log("warn", `peer=${replica.id};link closed;out of sync`);
      this.#isrChanged();
    }
  }

  /**
   * Refuses a send before anything is stored when fewer brokers are in sync than
   * `minInSyncReplicas` asks for.
   */
  checkReplicas(channel: string): void {
    const needed = this.options.minInSyncReplicas();
    if (needed <= 1) return;
    const inSync = this.inSyncCount() + 1;
    if (inSync >= needed && !this.#record.recording) return;
    throw new KittenError(
      "NOT_ENOUGH_REPLICAS",
      `Cannot send to "${channel}": ${inSync} of the ${needed} brokers cluster.minInSyncReplicas asks for are in sync ` +
        `(${this.#describe()}); nothing was stored, send again later`,
    );
  }

  /**
   * Streams a message the master accepts. Returns its log index (0 when no log is kept): the
   * position a restart goes on from counts it once it is stored here, replicas or not, so that a
   * slave that comes back after a restart of this master still gets it.
   */
  append(message: Message): number {
    if (this.#replicas.size === 0 && !this.options.keepsLog()) return 0;
    this.#flushRemovals();
    const index = (this.#lastAppend = ++this.#index);
    // The tail's copy is what every replica is sent: the frame is made once and kept once.
    const bytes = this.options.tail.push(index, appendFrameView(index, message));
    const now = this.options.now();
    for (const replica of this.#replicas.values()) {
      if (!replica.queue(index, bytes, now)) continue;
      this.#pump(replica);
    }
    return index;
  }

  /** A message left the master (every copy settled, or its store refused it): slaves drop it too. */
  remove(messageId: string): void {
    if (this.#replicas.size === 0 && !this.options.keepsLog()) return;
    this.#removals.push(messageId);
    if (this.#removals.length >= 1000) this.#flushRemovals();
  }

  /**
   * A message was taken back from its consumer after `deliveries` deliveries, due again at `at`
   * (0: at once): the replicas count and hold it back too (requeue_notices.ts).
   */
  requeued(messageId: string, deliveries: number, at: number): void {
    if (this.#replicas.size === 0) return; // one that attaches later is told the delays in force
    this.#requeues.note(messageId, deliveries, at);
    if (this.#requeues.size >= REQUEUES_PER_FRAME) this.#flushRequeues();
  }

  /**
   * Resolves once the message at `index` is on the replicas `minInSyncReplicas` asks for;
   * undefined when nothing needs waiting for (N = 1).
   */
  waitFor(index: number, channel: string): Promise<void> | undefined {
    if (this.options.minInSyncReplicas() <= 1) return undefined;
    if (index === 0 || this.#replicas.size === 0) {
      // Nobody was streamed to: too few replicas (checkReplicas let it through a moment before).
      return Promise.reject(this.#tooFew(channel));
    }
    const promise = this.#waiters.wait(index);
    this.#advance();
    return promise;
  }

  /** A replica stored everything up to `index`. */
  ack(link: ReplicaLink, index: number): void {
    const replica = this.#replicas.get(link);
    if (!replica) return;
    replica.ack(index);
    const now = this.options.now();
    if (
      replica.state !== "in-sync" && replica.acked >= replica.snapshotIndex && replica.snapshotLeft === 0 &&
      replica.acked >= this.#confirmed && replica.lagMs(now) < this.options.maxLagMs() / 2
    ) {
      replica.state = "in-sync";
      this.options.log("info", `peer=${replica.id};in sync;index=${replica.acked}`);
      this.#isrChanged(); // the replica is told once the set naming it is recorded
    }
    this.#advance();
  }

  /**
   * Goes on with what waits for a replica's socket (the rest of a snapshot, entries queued while
   * it was full). Called after every burst, so it costs nothing when every replica is idle;
   * removals wait for the next tick (or a full batch): a slave drops them a little later, in
   * frames of many ids.
   */
  flush(): void {
    if (this.#requeues.size > 0) this.#flushRequeues();
    this.#waiters.endBurst();
    this.#tellConfirmed(false);
    if (this.#waiting === 0) return;
    this.#waiting = 0;
    for (const replica of this.#replicas.values()) {
      this.#pump(replica);
    }
  }

  /** A replica's socket drained: the stream goes on. */
  drained(link: ReplicaLink): void {
    const replica = this.#replicas.get(link);
    if (replica) this.#pump(replica);
  }

  /** Drops from the in-sync set the replicas that acknowledged nothing for `maxLagMs`. */
  tick(): void {
    this.#record.retry(() => this.inSyncMembers());
    const now = this.options.now();
    const maxLag = this.options.maxLagMs();
    let changed = false;
    for (const replica of this.#replicas.values()) {
      if (replica.state !== "in-sync" || replica.lagMs(now) <= maxLag) continue;
      replica.state = "lagging";
      changed = true;
      this.options.log("warn", `peer=${replica.id};acknowledged nothing for ${maxLag} ms;out of sync`);
      this.#tellInSync(replica); // at once: it no longer holds everything confirmed
    }
    if (changed) this.#isrChanged();
    this.#flushRemovals();
    this.#tellConfirmed(true);
    this.#waiting++; // a replica whose socket drained without an event is looked at once per tick
    this.flush();
  }

  /**
   * Tells the replicas how far the in-sync set holds the log (they apply removals up to there):
   * at most every few milliseconds while it moves, and at every tick.
   */
  #tellConfirmed(force: boolean): void {
    if (this.#replicas.size === 0) return;
    const upTo = this.highWater;
    if (upTo === this.#toldConfirmed) return;
    const now = this.options.now();
    if (!force && now - this.#toldAt < CONFIRMED_EVERY_MS) return;
    this.#toldConfirmed = upTo;
    this.#toldAt = now;
    const bytes = frame(encode([OP.CONFIRMED, upTo]));
    for (const replica of this.#replicas.values()) {
      replica.link.pushFramed(bytes);
    }
  }

  inSyncCount(): number {
    let count = 0;
    for (const replica of this.#replicas.values()) if (replica.state === "in-sync") count++;
    return count;
  }

  /** The in-sync set, the master first. */
  inSyncMembers(): string[] {
    const members = [this.options.self()];
    for (const replica of this.#replicas.values()) if (replica.state === "in-sync") members.push(replica.id);
    return members;
  }

  status(): ReplicaStatus[] {
    const now = this.options.now();
    return [...this.#replicas.values()].map((replica) => ({
      peer: replica.id,
      state: replica.state,
      ackedIndex: replica.acked,
      lagEntries: replica.lagEntries,
      lagMs: replica.lagMs(now),
      snapshotLeft: replica.snapshotLeft,
      catchUp: replica.catchUp,
      lagBytes: replica.lagEntries === 0 ? 0 : Math.max(replica.queuedBytes, this.options.tail.bytesAfter(Math.max(replica.acked, replica.snapshotIndex))),
      bytesSent: replica.bytesSent,
      catchUpBytes: replica.catchUpBytes,
    }));
  }

  /** This broker stops being master: every send still waiting is refused, every link closed by the caller. */
  reset(reason: string): void {
    this.#failWaiters(new KittenError("NOT_ENOUGH_REPLICAS", `Cannot confirm: ${reason}`));
    this.#replicas.clear();
    this.#removals = [];
    this.#requeues.clear();
    this.#record.forget();
  }

  #flushRemovals(): void {
    if (this.#removals.length === 0) return;
    const ids = this.#removals;
    this.#removals = [];
    if (this.#replicas.size === 0 && !this.options.keepsLog()) return;
    const index = ++this.#index;
    const bytes = this.options.tail.push(index, removeFrame(index, ids));
    const now = this.options.now();
    for (const replica of this.#replicas.values()) {
      if (!replica.queue(index, bytes, now)) continue;
      this.#pump(replica);
    }
  }

  #flushRequeues(): void {
    const bytes = this.#requeues.take(this.options.now());
    for (const replica of this.#replicas.values()) {
      if (replica.notice(bytes)) this.#pump(replica);
    }
  }

  /** Writes what the replica's socket takes; one left with more to write is looked at again at the next flush(). */
  #pump(replica: Replica): void {
    replica.pump();
    if (!replica.idle) this.#waiting++;
  }

  /** Confirms every waiting send that every in-sync replica now holds. */
  #advance(): void {
    if (this.#waiters.length === 0 || this.#record.recording) return;
    const needed = this.options.minInSyncReplicas();
    let upTo = Number.MAX_SAFE_INTEGER;
    let inSync = 0;
    for (const replica of this.#replicas.values()) {
      if (replica.state !== "in-sync") continue;
      inSync++;
      upTo = Math.min(upTo, replica.acked);
    }
    if (inSync + 1 < needed) return this.#failWaiters(this.#tooFew(null));
    this.#confirmed = Math.max(this.#confirmed, upTo);
    this.#waiters.settle(upTo);
  }

  #failWaiters(error: KittenError): void {
    this.#waiters.failAll(error);
  }

  #tooFew(channel: string | null): KittenError {
    const needed = this.options.minInSyncReplicas();
    const what = channel === null ? "Cannot confirm a send" : `Cannot send to "${channel}"`;
    return new KittenError(
      "NOT_ENOUGH_REPLICAS",
      `${what}: ${this.inSyncCount() + 1} of the ${needed} brokers cluster.minInSyncReplicas asks for are in sync ` +
        `(${this.#describe()}); the message may be kept, send it again to have it confirmed`,
    );
  }

  #describe(): string {
    const parts = [...this.#replicas.values()].map((replica) => `${replica.id} ${replica.state}`);
    return parts.length === 0 ? "no slave connected" : parts.join(", ");
  }

  #tellInSync(replica: Replica): void {
    replica.toldInSync = replica.state === "in-sync";
    replica.link.pushFramed(frame(encode([OP.IN_SYNC, { inSync: replica.toldInSync, epoch: this.options.epoch() }])));
  }

  /**
   * Tells the replicas that joined the in-sync set, once it is recorded where an election reads
   * it: a slave that says it is in sync is one an election would take.
   */
  #tellRecorded(members: string[]): void {
    for (const replica of this.#replicas.values()) {
      if (replica.state === "in-sync" && !replica.toldInSync && members.includes(replica.id)) this.#tellInSync(replica);
    }
  }

  /**
   * A new term (elected through etcd): the in-sync set is recorded anew, since the record in etcd
   * may be an earlier master's. A failure is logged and retried at the next tick.
   */
  recordInSyncSet(): void {
    this.#record.forget();
    this.#isrChanged();
  }

  /** The in-sync set changed: recorded for elections first, when there is a record to keep (in_sync_record.ts). */
  #isrChanged(): void {
    this.#record.changed(this.inSyncMembers());
  }
}
