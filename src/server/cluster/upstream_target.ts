/**
 * What a slave's link to its master (upstream.ts) asks of its broker, and what it reports: the
 * broker stores and removes what the stream carries and keeps the log's position; the status is
 * what the admin app and a refused promotion show.
 */
import type { AppendOp, PeerPosition } from "../../protocol/peer_ops.ts";

export type UpstreamState = "idle" | "searching" | "catching-up" | "in-sync" | "out-of-sync";

/** What the slave's broker does with the stream. */
export interface UpstreamTarget {
  readonly serviceId: string;
  readonly peers: readonly string[];
  readonly keysDirectory: string;
  readonly keysName: string;
  readonly maxFrameSize: number;
  /** The highest epoch this broker knows of. */
  epoch(): number;
  /** A master with this epoch was seen. */
  sawEpoch(epoch: number, master: string): void;
  /** Stores a replicated message; a promise when its commit is pending. `generation` marks snapshot entries. */
  append(op: AppendOp, generation: number): void | Promise<void>;
  remove(ids: string[]): void;
  /** The master requeued these messages: `messageId, deliveries, msLeft` triples (REQUEUED). */
  requeued(triples: (string | number)[]): void;
  /**
   * The snapshot of `generation` is complete; messages that arrived before `before` and were not
   * in it go. The log now stands at `index`, with the master's `history`.
   */
  synced(generation: number, before: number, index: number, history: [number, number][] | undefined): void;
  /** Where this broker's log stands, sent with SYNC (undefined: it holds no position). */
  position(): PeerPosition | undefined;
  /** The master resumes this slave from `from`: what it holds after it goes, and `history` is the log's. */
  resumed(from: number, history: [number, number][]): void;
  /** A live entry of the log arrived (its CBOR, as the master wrote it, without the length prefix). */
  retain(index: number, body: Uint8Array): void;
  /** Everything up to `index` is stored (acknowledged to the master). */
  stored(index: number): void;
  /** The arrival seq the next accepted message will get. */
  nextSeq(): number;
  log(level: "info" | "warn" | "error", message: string): void;
}

export interface UpstreamStatus {
  state: UpstreamState;
  master: string | null;
  epoch: number | null;
  /** Snapshot messages received so far in the current catch-up, and how many it holds (once known). */
  snapshotReceived: number;
  snapshotTotal: number | null;
  /** The master's log index this slave last acknowledged. */
  ackedIndex: number;
  /** How this link caught up: from this slave's position, or from a snapshot (null: not yet told). */
  catchUp: "position" | "snapshot" | null;
  /** The master's confirmed index last received, and the removals waiting for it. */
  confirmedIndex: number;
  removalsWaiting: number;
  /** Replicated entries received and not yet stored. */
  pending: number;
  since: number;
}
