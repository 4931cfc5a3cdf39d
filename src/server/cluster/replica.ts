/**
 * One slave as the master sees it: the replication stream written to it over its peer link,
 * and how far it has acknowledged that stream.
 *
 * The stream is a log shared by every replica: each entry (one APPEND, or a batch of REMOVEs) is
 * encoded once, with its log index as sequence number, and the same bytes are queued to every
 * replica. A replica that attaches first receives a snapshot of every message the master holds,
 * all numbered with the log index at that moment, then a SYNCED marker, then the live entries.
 * Its acknowledged index says what it has stored.
 */
import { appendFrame, encode, frame, OP } from "../../protocol/mod.ts";
import type { AppendFields } from "../../protocol/peer_ops.ts";
import { Deque } from "../internal/deque.ts";

/** What a replica receives of one message: a message in memory, or a row read from the store. */
export type SnapshotEntry = AppendFields;

/**
 * Every message the master holds, read lazily as the replica's socket takes them: messages in
 * memory first, then those of durable queues that wait in the store only (paged).
 */
export interface Snapshot {
  /** How many it holds (paged rows counted when the snapshot was taken). */
  readonly count: number;
  readonly entries: Iterator<SnapshotEntry>;
}

/**
 * What a replica is sent before the live stream: from its position (RESUME and the entries it
 * lacks) or, when the master no longer holds that position, a snapshot (APPEND… and SYNCED).
 */
export interface CatchUp {
  readonly kind: "position" | "snapshot";
  /** The framed entries still to write, the marker included. */
  readonly frames: Iterator<Uint8Array>;
  /** How many frames it holds (an estimate while paged rows are read), the marker included. */
  readonly count: number;
  /** The log index the replica holds everything up to once it acknowledged it. */
  readonly index: number;
}

/** What a replica writes to: the peer's session (a fake in tests). */
export interface ReplicaLink {
  /** The peer broker's serviceId. */
  readonly peerId: string;
  /** Bytes written but not yet taken by the socket, plus the batch being filled. */
  readonly backlogBytes: number;
  /** Queues already framed bytes for the next flush. */
  pushFramed(bytes: Uint8Array): void;
  /** Ends the link with a coded error (the peer reconnects and catches up again). */
  fail(code: "REPLICA_TOO_SLOW", message: string): void;
}

/** How many bytes a replica's socket may hold before the stream waits for `drain`. */
const WRITE_WINDOW = 1 << 20;
/** Lag samples kept per replica: 4,096 × 5 ms covers 20 s of silence at full detail. */
const MAX_SAMPLES = 4_096;
/** Catch-up frames written per pump step: the event loop keeps serving clients meanwhile. */
const CATCH_UP_STEP = 2_000;

export type ReplicaState = "catching-up" | "in-sync" | "lagging";

export class Replica {
  state: ReplicaState = "catching-up";
  /** Whether it was last told it is in sync (IN_SYNC). */
  toldInSync = false;
  /** Highest log index the replica says it stored (everything up to it). */
  acked = -1;
  /** Log index of the catch-up: acknowledging it means the replica holds what it was sent. */
  readonly snapshotIndex: number;
  /** From a position or from a snapshot. */
  readonly catchUp: "position" | "snapshot";
  /** Highest log index queued to this replica. */
  queuedIndex: number;
  /** Bytes written to the link since it attached: the catch-up's, then the live stream's. */
  bytesSent = 0;
  /** Bytes of the catch-up alone (final once it is written). */
  catchUpBytes = 0;
  /** The catch-up still to write (null once its marker is written). */
  #catchUp: Iterator<Uint8Array> | null;
  #catchUpSent = 0;
  readonly #catchUpTotal: number;
  /** Encoded live entries waiting for the socket. */
  readonly #outbox = new Deque<Uint8Array>();
  #outboxBytes = 0;
  /** [log index, ms] samples of what was queued, oldest first: the lag is the age of the oldest unacked. */
  readonly #queuedAt = new Deque<[number, number]>();
  #lastSample: [number, number] = [0, 0];

  constructor(
    readonly link: ReplicaLink,
    catchUp: CatchUp,
    /** Bytes of live entries a replica may have queued before it is cut off. */
    readonly maxQueuedBytes: number,
    now: number,
  ) {
    this.#catchUp = catchUp.frames;
    this.#catchUpTotal = catchUp.count;
    this.catchUp = catchUp.kind;
    this.snapshotIndex = catchUp.index;
    this.queuedIndex = catchUp.index;
    this.#lastSample = [catchUp.index, now];
    this.#queuedAt.push(this.#lastSample);
  }

  get id(): string {
    return this.link.peerId;
  }

  /** Catch-up frames not written yet (an estimate while paged rows are read), at least 1 until the marker is. */
  get snapshotLeft(): number {
    return this.#catchUp === null ? 0 : Math.max(1, this.#catchUpTotal - this.#catchUpSent);
  }

  /** Nothing waits for its socket: no catch-up left, no live entry queued. */
  get idle(): boolean {
    return this.#catchUp === null && this.#outbox.length === 0;
  }

  /** Bytes of live entries waiting for its socket. */
  get queuedBytes(): number {
    return this.#outboxBytes;
  }

  /** Log entries queued to it and not acknowledged yet. */
  get lagEntries(): number {
    return Math.max(0, this.queuedIndex - this.acked);
  }

  /** How long the oldest entry it has not acknowledged has waited (0 when caught up). */
  lagMs(now: number): number {
    const oldest = this.#queuedAt.peek();
    return oldest === undefined ? 0 : now - oldest[1];
  }

  /** Queues a live entry (encoded once for every replica). False when the replica is too far behind. */
  queue(index: number, bytes: Uint8Array, now: number): boolean {
    this.#outbox.push(bytes);
    this.#outboxBytes += bytes.length;
    // The newest sample is still queued unless acks took every sample out.
    const last = this.#queuedAt.length > 0 ? this.#lastSample : null;
    // One sample per few milliseconds is enough to measure a lag in milliseconds; a replica that
    // acknowledges nothing for long keeps its oldest samples (its lag) and no more.
    if (last === null || (now - last[1] >= 5 && this.#queuedAt.length < MAX_SAMPLES)) {
      this.#lastSample = [index, now];
      this.#queuedAt.push(this.#lastSample);
    } else last[0] = index;
    this.queuedIndex = index;
    return this.#withinBound();
  }

  /**
   * Queues a frame that is not a log entry (REQUEUED): written in order with the entries, after the
   * catch-up. It has no index and is never acknowledged, so it takes no lag sample; it counts
   * towards the bound like an entry (false: the link was cut).
   */
  notice(bytes: Uint8Array): boolean {
    this.#outbox.push(bytes);
    this.#outboxBytes += bytes.length;
    return this.#withinBound();
  }

  /** False, with the link cut, once more than `maxQueuedBytes` wait for the replica's socket. */
  #withinBound(): boolean {
    if (this.#outboxBytes <= this.maxQueuedBytes) return true;
    this.link.fail(
      "REPLICA_TOO_SLOW",
      `Cannot keep replicating to "${this.id}": ${this.#outboxBytes} bytes wait for it (more than ${this.maxQueuedBytes}); ` +
        `it reconnects and catches up again`,
    );
    return false;
  }

  /** The replica stored everything up to `index`. */
  ack(index: number): void {
    if (index <= this.acked) return;
    this.acked = index;
    while (this.#queuedAt.length > 0 && this.#queuedAt.peek()![0] <= index) this.#queuedAt.shift();
  }

  /** Writes what the socket can take: the rest of the catch-up first, then live entries. */
  pump(): void {
    const link = this.link;
    while (this.#catchUp !== null && link.backlogBytes < WRITE_WINDOW) {
      const frames = this.#catchUp;
      let step = 0;
      let next = frames.next();
      for (; !next.done; next = frames.next()) {
        link.pushFramed(next.value);
        this.#catchUpSent++;
        this.bytesSent += next.value.length;
        if (++step === CATCH_UP_STEP) break;
      }
      if (!next.done) continue;
      this.catchUpBytes = this.bytesSent;
      this.#catchUp = null; // what it held is the queues' and the store's to free now
    }
    if (this.#catchUp !== null) return;
    while (link.backlogBytes < WRITE_WINDOW && this.#outbox.length > 0) {
      const bytes = this.#outbox.shift()!;
      this.#outboxBytes -= bytes.length;
      this.bytesSent += bytes.length;
      link.pushFramed(bytes);
    }
  }
}

/** A snapshot as catch-up frames: every message numbered `index`, then SYNCED with the master's history. */
export function snapshotCatchUp(snapshot: Snapshot, index: number, history: [number, number][]): CatchUp {
  function* frames(): Generator<Uint8Array> {
    let messages = 0;
    for (let next = snapshot.entries.next(); !next.done; next = snapshot.entries.next()) {
      messages++;
      yield appendFrame(index, next.value);
    }
    yield frame(encode([OP.SYNCED, index, { messages, history }]));
  }
  return { kind: "snapshot", frames: frames(), count: snapshot.count + 1, index };
}

/** A catch-up from a position: RESUME (go back to `from`), then the retained entries after it. */
export function positionCatchUp(from: number, to: number, entries: Uint8Array[], history: [number, number][]): CatchUp {
  function* frames(): Generator<Uint8Array> {
    yield frame(encode([OP.RESUME, from, { from, to, history }]));
    yield* entries;
  }
  return { kind: "position", frames: frames(), count: entries.length + 1, index: to };
}

/** The REMOVE frame of settled messages, with its log index. */
export function removeFrame(index: number, ids: string[]): Uint8Array {
  return frame(encode([OP.REMOVE, index, ids]));
}
