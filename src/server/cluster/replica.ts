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
import { encode, frame, OP } from "../../protocol/mod.ts";
import { Deque } from "../internal/deque.ts";
import type { PeerDeadLetter } from "../../protocol/peer_ops.ts";

/** What a replica receives of one message: a message in memory, or a row read from the store. */
export interface SnapshotEntry {
  readonly id: string;
  readonly queue: string;
  readonly destination: string;
  readonly body: Uint8Array;
  readonly created: number;
  readonly deliveries?: number;
  readonly deadLetter?: PeerDeadLetter | null;
}

/**
 * Every message the master holds, read lazily as the replica's socket takes them: messages in
 * memory first, then those of durable queues that wait in the store only (paged).
 */
export interface Snapshot {
  /** How many it holds (paged rows counted when the snapshot was taken). */
  readonly count: number;
  readonly entries: Iterator<SnapshotEntry>;
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
/** Snapshot messages encoded per pump step: the event loop keeps serving clients meanwhile. */
const SNAPSHOT_STEP = 2_000;

export type ReplicaState = "catching-up" | "in-sync" | "lagging";

export class Replica {
  state: ReplicaState = "catching-up";
  /** Highest log index the replica says it stored (everything up to it). */
  acked = -1;
  /** Log index of the snapshot: acknowledging it means the snapshot is stored. */
  readonly snapshotIndex: number;
  /** Highest log index queued to this replica. */
  queuedIndex: number;
  /** The snapshot still to encode (null once its SYNCED marker is written). */
  #snapshot: Iterator<SnapshotEntry> | null;
  #snapshotSent = 0;
  readonly #snapshotTotal: number;
  /** Encoded live entries waiting for the socket. */
  readonly #outbox = new Deque<Uint8Array>();
  #outboxBytes = 0;
  /** [log index, ms] samples of what was queued, oldest first: the lag is the age of the oldest unacked. */
  readonly #queuedAt = new Deque<[number, number]>();
  #lastSample: [number, number] = [0, 0];

  constructor(
    readonly link: ReplicaLink,
    snapshot: Snapshot,
    snapshotIndex: number,
    /** Bytes of live entries a replica may have queued before it is cut off. */
    readonly maxQueuedBytes: number,
    now: number,
  ) {
    this.#snapshot = snapshot.entries;
    this.#snapshotTotal = snapshot.count;
    this.snapshotIndex = snapshotIndex;
    this.queuedIndex = snapshotIndex;
    this.#lastSample = [snapshotIndex, now];
    this.#queuedAt.push(this.#lastSample);
  }

  get id(): string {
    return this.link.peerId;
  }

  /** Snapshot messages not written yet (an estimate while paged rows are read), plus the SYNCED marker. */
  get snapshotLeft(): number {
    return this.#snapshot === null ? 0 : Math.max(0, this.#snapshotTotal - this.#snapshotSent) + 1;
  }

  /** Nothing waits for its socket: no snapshot left, no live entry queued. */
  get idle(): boolean {
    return this.#snapshot === null && this.#outbox.length === 0;
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

  /** Writes what the socket can take: the rest of the snapshot first, then live entries. */
  pump(): void {
    const link = this.link;
    while (this.#snapshot !== null && link.backlogBytes < WRITE_WINDOW) {
      const snapshot = this.#snapshot;
      let step = 0;
      let next = snapshot.next();
      for (; !next.done; next = snapshot.next()) {
        link.pushFramed(appendFrame(this.snapshotIndex, next.value));
        this.#snapshotSent++;
        if (++step === SNAPSHOT_STEP) break;
      }
      if (!next.done) continue;
      link.pushFramed(frame(encode([OP.SYNCED, this.snapshotIndex, { messages: this.#snapshotSent }])));
      this.#snapshot = null; // what it held is the queues' and the store's to free now
    }
    if (this.#snapshot !== null) return;
    while (link.backlogBytes < WRITE_WINDOW && this.#outbox.length > 0) {
      const bytes = this.#outbox.shift()!;
      this.#outboxBytes -= bytes.length;
      link.pushFramed(bytes);
    }
  }
}

/** The APPEND frame of a message, with its log index. */
export function appendFrame(index: number, message: SnapshotEntry): Uint8Array {
  return frame(encode([
    OP.APPEND, index, message.id, message.queue, message.destination, message.body, message.created,
    message.deliveries ?? 0, message.deadLetter ?? null,
  ]));
}

/** The REMOVE frame of settled messages, with its log index. */
export function removeFrame(index: number, ids: string[]): Uint8Array {
  return frame(encode([OP.REMOVE, index, ids]));
}
