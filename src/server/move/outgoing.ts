/**
 * A queue move, on the source group's master: it streams the queue to the target group's master
 * while the queue keeps serving, then fences it and switches ownership.
 *
 * 1. Links to the target's master as a peer and says MOVE_BEGIN (target_link.ts: a link that
 *    fails before the target takes the move is made again, for up to ACK_TIMEOUT_MS).
 * 2. Taps the queue (every message it takes from then on, and every message settled, goes to the
 *    target as it happens) and, in the same turn of the event loop, takes its snapshot (messages
 *    in memory and being stored, then the rows paged to the store, read page by page): nothing is
 *    missed between the two, and the target drops a duplicate by its id.
 * 3. Streams the snapshot within a window of unacknowledged entries; the target acknowledges an
 *    entry once it and its in-sync replicas hold it.
 * 4. Fences the queue (its sends are held: QUEUE_MOVING, which clients resend) at the last entry
 *    streamed, waits for the target to hold everything up to it, and switches ownership in etcd,
 *    only while this broker is still its group's master at the epoch the move began with.
 *
 * A link that ends while the snapshot streams, or a refusal that waiting fixes then, is made
 * again (to the same master, or to the one its group elects in its place), and what the target
 * had not acknowledged is written again (unacked_stream.ts): the target keeps what it holds.
 * Anything else that goes wrong (a link that ends once the queue is fenced, another refusal, no
 * progress, a switch that does not hold) rolls the move back: the queue stays here, unfenced, and
 * the record says why.
 */
import { checkMoveAck, encode, FrameBatch, isErrorCode, type KittenError, OP, shouldResend } from "../../protocol/mod.ts";
import { writeAppend, writesByHand } from "../../protocol/hot_ops.ts";
import type { Message } from "../queue/message.ts";
import type { Queue } from "../queue/queue.ts";
import type { Snapshot, SnapshotEntry } from "../cluster/replica.ts";
import type { MoveRecord } from "../cluster/move_records.ts";
import type { QueueMap } from "../cluster/queue_map.ts";
import { TargetLink } from "./target_link.ts";
import { UnackedStream } from "./unacked_stream.ts";
import { MovePacer } from "./pacer.ts";
import { TrafficBaseline, type TrafficMeter } from "./traffic.ts";

export interface OutgoingHost {
  readonly serviceId: string;
  readonly keysDirectory: string;
  readonly keysName: string;
  readonly maxFrameSize: number;
  /** How fast the snapshot is streamed at most (`cluster.moveBytesPerSecond`): the live queue is not held back. */
  readonly bytesPerSecond: number;
  readonly map: QueueMap;
  /** This broker's client traffic: the snapshot slows down when the move takes its room (pacer.ts). */
  readonly traffic: TrafficMeter;
  now(): number;
  log(level: "info" | "warn" | "error", message: string): void;
  /** The queue's snapshot, taken now (cluster/snapshot.ts). */
  snapshot(queue: Queue): Snapshot;
  /** The move ended (done or rolled back): the queue is no longer tapped nor fenced. */
  ended(move: OutgoingMove): void;
}

/** Entries streamed and not yet acknowledged by the target, at most (the snapshot waits past it). */
const WINDOW = 20_000;
/** Bytes streamed and not yet acknowledged, at most, whatever the messages' size (the snapshot waits past it). */
const WINDOW_BYTES = 32 * 1024 * 1024;
/** Progress is written to the move record this often. */
const PROGRESS_MS = 2_000;
/** How soon a snapshot held back by `bytesPerSecond` goes on, and the most it streams in one turn (in ms of its rate). */
const PACE_MS = 10;
const BURST_MS = 50;
/**
 * The snapshot goes in bursts of at least this many bytes (about 200 messages of 100 bytes),
 * however slow its pace: each burst costs the target a commit (and an fsync), so a pace slowed
 * to a trickle must not become a hundred tiny commits a second.
 */
const MIN_BURST_BYTES = 32 * 1024;
/** The longest wait between two bursts. */
const MAX_PACE_MS = 1_000;
/** Bytes written to the target and not yet taken by the socket, at most: past it the target cannot keep up with the queue's traffic. */
const MAX_UNSENT_BYTES = 256 * 1024 * 1024;
/** The target must acknowledge something within this long while entries wait (and take the move within it). */
const ACK_TIMEOUT_MS = 10_000;
/**
 * After a lost link, the target group must acknowledge more within this long: its election (the
 * lost master's etcd lease runs out first, 3 s by default) and its slaves' return to its in-sync
 * set, on a loaded host, take more than ACK_TIMEOUT_MS; a move that stalls longer is rolled back,
 * well within the 30 s after which any master of either group would roll it back.
 */
const RELINK_TIMEOUT_MS = 20_000;
/** From the fence, the target must hold everything within this long, or the move is rolled back. */
const FENCE_TIMEOUT_MS = 5_000;

/**
 * "relinking": the link to the target ended while the snapshot streamed; the source links to the
 * target group's master again (the same broker, or the slave elected in its place) and writes
 * again what it had not acknowledged (unacked_stream.ts).
 */
type State = "linking" | "streaming" | "relinking" | "fenced" | "switching" | "ended";

export class OutgoingMove {
  #state: State = "linking";
  #record: MoveRecord;
  /** The link to the target group's master, made again while it fails before the target takes the move. */
  readonly #target: TargetLink;
  /** Since when the target has acknowledged nothing more across lost links (null: it has since), and why the last was lost. */
  #stalledSince: number | null = null;
  #lostWhy = "";
  /** What the target has not acknowledged yet, as written: written again after a new link. */
  readonly #unacked = new UnackedStream();
  #entries: Iterator<SnapshotEntry> | null = null;
  #seq = 0;
  #acked = 0;
  #lastAckAt: number;
  #copied = 0;
  #bytes = 0;
  /** Snapshot bytes that may be streamed now (see #refill), and the pump waiting for more. */
  #allowance = 0;
  /** A burst is under way: it goes on while the allowance lasts. */
  #bursting = false;
  #refilledAt = performance.now();
  #paced: ReturnType<typeof setTimeout> | null = null;
  readonly #pacer = new MovePacer();
  /** The client traffic here before the snapshot began, and the target's latest ratio (MOVE_ACK). */
  #traffic: TrafficBaseline | null = null;
  #targetTraffic: number | null = null;
  #fenceSeq = 0;
  #fencedAt = 0;
  #progressAt: number;
  /** Frames waiting for the next write, and ids settled since the last MOVE_REMOVE. */
  #frames = new FrameBatch(64 * 1024);
  #removed: string[] = [];
  #flushing = false;
  /** etcd writes of this move, one at a time, in order. */
  #etcd: Promise<unknown> = Promise.resolve();

  constructor(readonly host: OutgoingHost, readonly queue: Queue, record: MoveRecord) {
    this.#record = record;
    this.#target = new TargetLink(host, record, {
      taken: () => (this.#state === "relinking" ? this.#resumed() : this.#state === "linking" ? this.#begin() : undefined),
      frame: (value) => this.#frame(value),
      lost: (reason) => this.#linkLost(reason),
    });
    this.#lastAckAt = host.now();
    this.#progressAt = host.now();
  }

  get id(): string {
    return this.#record.id;
  }

  /** True while sends to the queue are held for the switch. */
  get fenced(): boolean {
    return this.#state === "fenced" || this.#state === "switching";
  }

  start(): void {
    this.#target.open(null);
  }

  /** The link ended after the target took the move: made again while the snapshot streams (the target's group may elect another master). */
  #linkLost(reason: string, refused = false): void {
    if (this.#state === "ended") return;
    // While fenced, sends to the queue are held: they do not wait for the target group's election.
    if (this.#state !== "streaming") return void this.rollback(reason);
    this.#state = "relinking";
    this.#stalledSince ??= this.host.now();
    this.#lostWhy = reason;
    this.host.log("warn", `move of "${this.queue.name}" to group "${this.#record.to}": ${reason}; linking again`);
    this.#target.open(this.#seq, refused ? reason : null);
  }

  #frame(value: unknown[]): void {
    switch (value[0]) {
      case OP.MOVE_ACK: {
        const [, seq, traffic] = checkMoveAck(value);
        this.#targetTraffic = traffic ?? null;
        if (seq <= this.#acked) return;
        this.#acked = seq;
        this.#stalledSince = null;
        this.#unacked.acknowledge(seq);
        this.#lastAckAt = this.host.now();
        this.#pump();
        return;
      }
      case OP.ERROR: {
        const why = `the target refused: ${String(value[2])}: ${String(value[3])}`;
        // A refusal that waiting fixes (a group just elected that has not recorded its in-sync
        // set yet, a target stopping): linked again, as after a lost link.
        if (this.#state === "streaming" && isErrorCode(value[2]) && shouldResend(value[2])) return this.#linkLost(why, true);
        return void this.rollback(why);
      }
      default:
        return;
    }
  }

  /** The target took the move: tap the queue and take its snapshot in this same turn, then stream it. */
  #begin(): void {
    this.#state = "streaming";
    this.#traffic = new TrafficBaseline(this.host.traffic);
    const snapshot = this.host.snapshot(this.queue);
    this.#entries = snapshot.entries;
    this.#record = { ...this.#record, phase: "snapshot", snapshot: snapshot.count };
    this.host.log("info", `move of "${this.queue.name}" to group "${this.#record.to}": streaming ${snapshot.count} messages`);
    this.#progress();
    this.#pump();
  }

  /**
   * The target's master took the move again over a new link (the one before ended while the
   * snapshot streamed): what it has not acknowledged is written again (it drops what it holds).
   */
  #resumed(): void {
    this.#state = "streaming";
    this.#lastAckAt = this.host.now();
    this.host.log("info", `move of "${this.queue.name}": linked to the target again; writing again ${this.#unacked.bytes} bytes it had not acknowledged (entries after ${this.#acked})`);
    for (const bytes of this.#unacked.chunks()) this.#target.writeFramed(bytes);
    this.#pump();
  }

  /** True while the queue's messages and settlements go to the target (the tap). */
  get #tapped(): boolean {
    return this.#state === "streaming" || this.#state === "fenced" || this.#state === "relinking";
  }

  /** A message the queue took (the tap): streamed at once. */
  appended(message: Message): void {
    if (!this.#tapped) return;
    this.#push(message);
  }

  /** A message of the queue settled (acked, dead, expired): the target drops it too. */
  settled(message: Message): void {
    if (!this.#tapped) return;
    this.#removed.push(message.id);
    this.#schedule();
  }

  /** Queues a message for the target; returns its frame's size. */
  #push(entry: SnapshotEntry): number {
    const seq = ++this.#seq;
    let size: number;
    if (writesByHand(seq, entry)) {
      // Written by hand (hot_ops.ts) into the batch, as a master writes APPEND: no intermediate buffer, no copy.
      const before = this.#frames.byteLength;
      writeAppend(this.#frames, seq, entry, OP.MOVE_APPEND);
      size = this.#frames.byteLength - before;
    } else {
      size = this.#queueEncoded([OP.MOVE_APPEND, seq, entry.id, entry.queue, entry.destination, entry.body, entry.created, entry.deliveries ?? 0, entry.deadLetter ?? null]);
    }
    this.#copied++;
    this.#schedule();
    return size;
  }


  /** Queues a frame of the generic encoder as the next entry (`op` carries `#seq`); returns its size. */
  #queueEncoded(op: unknown[]): number {
    const before = this.#frames.byteLength;
    this.#frames.push(encode(op));
    return this.#frames.byteLength - before;
  }

  /**
   * Bytes streamed or queued and not acknowledged yet: what the target may be sent again, and the
   * frames of this turn (a chunk partly acknowledged counts whole).
   */
  #unackedBytes(): number {
    return this.#unacked.bytes + this.#frames.byteLength;
  }

  /**
   * The snapshot's bytes allowed now: the pacer's share of `bytesPerSecond`, accrued since the
   * last refill, at most BURST_MS worth (or MIN_BURST_BYTES): each turn of the event loop encodes
   * a slice, so sends wait little behind it. Returns the pace, in bytes per second.
   */
  #refill(): number {
    const now = performance.now();
    if (this.#traffic) this.#pacer.adjust(now, [this.#traffic.ratio(), this.#targetTraffic]);
    const rate = this.host.bytesPerSecond * this.#pacer.factor;
    const most = Math.max((rate * BURST_MS) / 1000, MIN_BURST_BYTES);
    this.#allowance = Math.min(most, this.#allowance + ((now - this.#refilledAt) / 1000) * rate);
    this.#refilledAt = now;
    return rate;
  }

  #schedule(): void {
    if (this.#flushing) return;
    this.#flushing = true;
    queueMicrotask(() => this.#flush());
  }

  #flush(): void {
    this.#flushing = false;
    const frames = this.#frames;
    if (this.#removed.length > 0) {
      this.#queueEncoded([OP.MOVE_REMOVE, ++this.#seq, this.#removed]);
      this.#removed = [];
    }
    if (frames.byteLength === 0) return;
    const bytes = frames.take();
    this.#bytes += bytes.length;
    this.#unacked.push(this.#seq, bytes);
    // While relinking the link drops them: they are written again once the target takes the move again.
    this.#target.writeFramed(bytes);
  }

  /** Streams snapshot entries while the window allows; once all are held, fences the queue. */
  #pump(): void {
    if (this.#state === "streaming" && this.#entries) {
      const rate = this.#refill();
      if (this.#allowance >= MIN_BURST_BYTES) this.#bursting = true;
      while (this.#bursting && this.#seq - this.#acked < WINDOW && this.#allowance > 0 && this.#unackedBytes() < WINDOW_BYTES) {
        const next = this.#entries.next();
        if (next.done) {
          this.#entries = null;
          this.#record = { ...this.#record, phase: "live" };
          break;
        }
        // One settled since the snapshot was taken goes too: its removal went before it, and the
        // target drops it on arrival (a message being stored then may be paged now: not settled).
        this.#allowance -= this.#push(next.value);
      }
      if (this.#allowance <= 0) this.#bursting = false;
      if (this.#entries && !this.#bursting && this.#paced === null) {
        const untilBurst = ((MIN_BURST_BYTES - Math.max(0, this.#allowance)) / rate) * 1000;
        this.#paced = setTimeout(() => {
          this.#paced = null;
          this.#pump();
        }, Math.min(MAX_PACE_MS, Math.max(PACE_MS, untilBurst)));
      }
    }
    // Everything of the snapshot held by the target: fence, once what is in flight is small.
    if (this.#state === "streaming" && this.#entries === null && this.#seq - this.#acked < WINDOW / 4 && this.#unackedBytes() < WINDOW_BYTES / 4) {
      this.#fence();
    }
    if (this.#state === "fenced" && this.#acked >= this.#fenceSeq) this.#switch();
  }

  #fence(): void {
    this.#state = "fenced";
    this.#fencedAt = this.host.now();
    this.#sendDelays();
    this.#flush();
    this.#fenceSeq = this.#seq;
    this.#record = { ...this.#record, phase: "fenced" };
    this.host.log("info", `move of "${this.queue.name}": fenced at entry ${this.#fenceSeq}`);
    if (this.#acked >= this.#fenceSeq) this.#switch();
  }

  /**
   * Delayed requeues keep their delay on the target: each message nacked with a delay goes again,
   * with the time it has left (the target holds it already, and applies the delay to it). A
   * message delayed for several groups takes the latest.
   */
  #sendDelays(): void {
    const now = this.host.now();
    const latest = new Map<Message, number>();
    for (const copy of this.queue.delayedCopies()) {
      if (copy.at > now && copy.at > (latest.get(copy.message) ?? 0)) latest.set(copy.message, copy.at);
    }
    for (const [message, at] of latest) {
      const { id, queue, destination, body, created, deliveries, deadLetter } = message;
      this.#queueEncoded([OP.MOVE_APPEND, ++this.#seq, id, queue, destination, body, created, deliveries, deadLetter, Math.ceil(at - now)]);
    }
  }

  #switch(): void {
    this.#state = "switching";
    const fenceMs = this.host.now() - this.#fencedAt;
    this.#write(async () => {
      const redelivered = this.queue.depth().inflight;
      const now = this.host.now();
      const done = await this.host.map.switchOwner(this.#record, { copied: this.#copied, bytes: this.#bytes, redelivered, fenceMs, finishedAt: now, updatedAt: now });
      if (!done) return this.rollback("the switch did not hold: this broker's epoch or the move record changed");
      this.#end();
      this.host.log("info", `move of "${this.queue.name}" to group "${done.to}" done: ${this.#copied} messages streamed, sends held ${fenceMs} ms`);
    });
  }

  /** About once a second: progress to the record, and a target that stopped acknowledging ends the move. */
  tick(now: number): void {
    if (this.#state === "ended" || this.#state === "switching") return;
    if (this.#stalledSince !== null && now - this.#stalledSince > RELINK_TIMEOUT_MS) {
      const last = this.#target.failure ?? this.#lostWhy;
      return void this.rollback(`the target acknowledged nothing more within ${RELINK_TIMEOUT_MS} ms of its link ending; the last: ${last}`);
    }
    if (this.#state === "relinking") {
      if (this.#unackedBytes() > MAX_UNSENT_BYTES) {
        return void this.rollback(`the target could not be linked to again before ${MAX_UNSENT_BYTES / 1048576} MiB waited to be sent`);
      }
      return;
    }
    if (this.#target.pendingBytes > MAX_UNSENT_BYTES) {
      return void this.rollback(`the target takes the queue's traffic more slowly than it comes: ${MAX_UNSENT_BYTES / 1048576} MiB wait to be sent`);
    }
    if (this.#seq > this.#acked && now - this.#lastAckAt > ACK_TIMEOUT_MS) {
      return void this.rollback(`the target acknowledged nothing for ${ACK_TIMEOUT_MS} ms`);
    }
    if (this.#state === "fenced" && now - this.#fencedAt > FENCE_TIMEOUT_MS) {
      return void this.rollback(`the target did not hold everything within ${FENCE_TIMEOUT_MS} ms of the fence`);
    }
    if (this.#state === "linking" && now - this.#record.requestedAt > ACK_TIMEOUT_MS && now - this.#lastAckAt > ACK_TIMEOUT_MS) {
      const last = this.#target.failure === null ? "" : `; the last try: ${this.#target.failure}`;
      return void this.rollback(`the target did not take the move within ${ACK_TIMEOUT_MS} ms${last}`);
    }
    if (now - this.#progressAt >= PROGRESS_MS) this.#progress();
  }

  #progress(): void {
    this.#progressAt = this.host.now();
    this.#write(async () => {
      if (!this.#progressing()) return;
      const updated = await this.host.map.updateMove(this.#record, { copied: this.#copied, bytes: this.#bytes, updatedAt: this.host.now() });
      if (updated) this.#record = updated;
      else if (this.#progressing()) this.#lost();
    });
  }

  /** True while progress may be written: not ended, and no switch under way (it writes the record). */
  #progressing(): boolean {
    return this.#state !== "ended" && this.#state !== "switching";
  }

  /** Another broker changed the record (rolled it back): this move stops here. */
  #lost(): void {
    const known = this.host.map.move(this.queue.name);
    this.host.log("warn", `move of "${this.queue.name}": its record changed elsewhere (${known?.state ?? "gone"}${known?.reason ? `: ${known.reason}` : ""}); stopping`);
    this.#end();
  }

  /** The record was rolled back by another broker (watch): stop without writing. */
  abandon(): void {
    if (this.#state !== "ended") this.#lost();
  }

  /** Ends the move, leaves the queue here unfenced, and records why (unless another broker did). */
  rollback(reason: string): Promise<void> {
    if (this.#state === "ended") return Promise.resolve();
    this.#end();
    this.host.log("warn", `move of "${this.queue.name}" to group "${this.#record.to}" rolled back: ${reason}`);
    return this.#write(async () => {
      await this.host.map.updateMove(this.#record, { state: "rolled-back", reason, finishedAt: this.host.now(), updatedAt: this.host.now() });
    });
  }

  #end(): void {
    this.#state = "ended";
    if (this.#paced) clearTimeout(this.#paced);
    this.#entries = null;
    this.#frames.clear();
    this.#unacked.clear();
    this.#removed = [];
    this.#target.close();
    this.host.ended(this);
  }

  /** Runs etcd writes one after the other; a failed one is logged (the 30 s rule ends a stuck move). */
  #write(action: () => Promise<unknown>): Promise<void> {
    const next = this.#etcd.then(action).then(() => {}, (error: KittenError) => {
      this.host.log("warn", `move of "${this.queue.name}": ${error.message}`);
    });
    this.#etcd = next;
    return next;
  }
}
