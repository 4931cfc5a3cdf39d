/**
 * Operations between brokers (peer links). A slave connects to the master like a client, with
 * `hello.peer` set and its own key pair, then asks for the replication stream with SYNC. The
 * master answers, when it still holds the slave's position (SYNC's `position`), with RESUME and
 * the entries the slave lacks; otherwise with a snapshot of every message it holds (APPEND…) and
 * a SYNCED marker; then the live stream: APPEND for each message it accepts and REMOVE for each message settled. The slave
 * acknowledges with REPL_ACK once everything up to a sequence number is stored per its
 * durability. IN_SYNC tells the slave whether the master counts it as an in-sync replica.
 *
 * Every stream frame carries a sequence number, rising by one per frame on one link.
 */
import { KittenError } from "./errors.ts";
import type { DeadLetterInfo } from "./ops.ts";
import type { OP } from "./ops.ts";

/** Where a dead-lettered message came from: the same map DELIVER carries. */
export type PeerDeadLetter = DeadLetterInfo;

/** The fields of an APPEND besides its op and index: a message in memory, or a row read from the store. */
export interface AppendFields {
  readonly id: string;
  readonly queue: string;
  readonly destination: string;
  readonly body: Uint8Array;
  readonly created: number;
  readonly deliveries?: number;
  readonly deadLetter?: PeerDeadLetter | null;
}

/**
 * [SYNC, ref, {epoch, position?}]: the slave's highest known epoch, and where its log stands
 * (absent: it holds no position, a snapshot is what it needs).
 */
export type SyncOp = [typeof OP.SYNC, number, { epoch: number; position?: PeerPosition }];
/** A slave's place in the replication log (cluster/history.ts). */
export interface PeerPosition {
  /** `[epoch, first index]` pairs of the history it holds, oldest first. */
  history: [number, number][];
  /** The last index it holds. */
  index: number;
  /** The lowest index it can go back to. */
  floor: number;
}
/**
 * [RESUME, seq, {from, to, history}]: the slave catches up from a position: it drops what it
 * holds after `from` (where the two histories part), takes `history` as its own, and the entries
 * `from + 1 … to` follow, then the live stream. `seq` is `from`.
 */
export type ResumeOp = [typeof OP.RESUME, number, { from: number; to: number; history: [number, number][] }];
/** [CONFIRMED, index]: every in-sync replica holds the log up to `index` (removals up to it may be applied). */
export type ConfirmedOp = [typeof OP.CONFIRMED, number];
/**
 * [REQUEUED, [messageId, deliveries, msLeft, …]]: messages the master took back from a consumer
 * (a nack, or an ack deadline passed), each delivered `deliveries` times so far and due again
 * `msLeft` ms from now (0: at once). Not a log entry: no seq, nothing acknowledged (PROTOCOL.md).
 */
export type RequeuedOp = [typeof OP.REQUEUED, (string | number)[]];
/** [APPEND, seq, messageId, queue, destination, body, created, deliveries, deadLetter or null] */
export type AppendOp = [
  typeof OP.APPEND,
  number,
  string,
  string,
  string,
  Uint8Array,
  number,
  number,
  PeerDeadLetter | null,
];
/** [REMOVE, seq, [messageId, …]]: messages whose every copy the master settled. */
export type RemoveOp = [typeof OP.REMOVE, number, string[]];
/**
 * [SYNCED, seq, {messages, history?}]: the snapshot is complete (it held `messages` messages);
 * `history` is the master's epoch table, which the slave takes as its own.
 */
export type SyncedOp = [typeof OP.SYNCED, number, { messages: number; history?: [number, number][] }];
/** [REPL_ACK, seq]: everything up to `seq` is stored on the slave. */
export type ReplAckOp = [typeof OP.REPL_ACK, number];
/** [IN_SYNC, {inSync, epoch}]: whether the master counts this slave as an in-sync replica. */
export type InSyncOp = [typeof OP.IN_SYNC, { inSync: boolean; epoch: number }];

const MAX_REMOVE_LIST = 100_000;

/**
 * The largest frame a broker reads from a peer: a message as large as `maxFrameSize` allows
 * arrives with its queue, destination, dates and dead-letter fields around it (APPEND, MOVE_APPEND).
 */
export function peerMaxFrameSize(maxFrameSize: number): number {
  return Math.max(maxFrameSize * 2, 1 << 20) + 1024;
}

function bad(op: string, detail: string): KittenError {
  return new KittenError("BAD_REQUEST", `Cannot read ${op}: ${detail}`);
}

function isUint(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

/** The most epochs a history may list. */
const MAX_HISTORY = 1_000;

function isHistory(value: unknown): value is [number, number][] {
  return Array.isArray(value) && value.length <= MAX_HISTORY &&
    value.every((pair) => Array.isArray(pair) && pair.length === 2 && isUint(pair[0]) && isUint(pair[1]));
}

export function checkSync(v: unknown[]): SyncOp {
  const info = v[2] as { epoch?: unknown; position?: unknown } | undefined;
  if (!isUint(v[1])) throw bad("sync", "ref must be an unsigned integer");
  if (typeof info !== "object" || info === null || !isUint(info.epoch)) throw bad("sync", "expected {epoch}");
  const position = info.position as { history?: unknown; index?: unknown; floor?: unknown } | null | undefined;
  if (position !== undefined && position !== null) {
    if (typeof position !== "object" || !isHistory(position.history) || !isUint(position.index) || !isUint(position.floor)) {
      throw bad("sync", `position must be {history: [[epoch, index]…] (at most ${MAX_HISTORY}), index, floor}`);
    }
    if (position.floor > position.index) throw bad("sync", "position.floor must not exceed position.index");
  }
  return v as SyncOp;
}

export function checkResume(v: unknown[]): ResumeOp {
  const info = v[2] as { from?: unknown; to?: unknown; history?: unknown } | undefined;
  if (!isUint(v[1]) || typeof info !== "object" || info === null || !isUint(info.from) || !isUint(info.to) ||
    !isHistory(info.history) || info.to < info.from) {
    throw bad("resume", "expected [seq, {from, to, history}] with from <= to");
  }
  return v as ResumeOp;
}

export function checkConfirmed(v: unknown[]): ConfirmedOp {
  if (!isUint(v[1])) throw bad("confirmed", "index must be an unsigned integer");
  return v as ConfirmedOp;
}

export function checkRequeued(v: unknown[]): RequeuedOp {
  const triples = v[1];
  if (!Array.isArray(triples) || triples.length % 3 !== 0 || triples.length > 3 * MAX_REMOVE_LIST) {
    throw bad("requeued", `expected [messageId, deliveries, msLeft, …] with at most ${MAX_REMOVE_LIST} messages`);
  }
  for (let i = 0; i < triples.length; i += 3) {
    if (typeof triples[i] !== "string" || !isUint(triples[i + 1]) || !isUint(triples[i + 2])) {
      throw bad("requeued", "each message is a messageId, an unsigned delivery count and an unsigned msLeft");
    }
  }
  return v as RequeuedOp;
}

export function checkAppend(v: unknown[]): AppendOp {
  if (!isUint(v[1])) throw bad("append", "seq must be an unsigned integer");
  if (typeof v[2] !== "string" || v[2].length === 0) throw bad("append", "messageId must be a non-empty string");
  if (typeof v[3] !== "string" || typeof v[4] !== "string") throw bad("append", "queue and destination must be strings");
  if (!(v[5] instanceof Uint8Array)) throw bad("append", "body must be a byte string");
  if (typeof v[6] !== "number" || !isUint(v[7])) throw bad("append", "created and deliveries must be numbers");
  const dead = v[8];
  if (dead !== null && dead !== undefined && (typeof dead !== "object" || Array.isArray(dead))) {
    throw bad("append", "deadLetter must be a map or null");
  }
  return v as AppendOp;
}

export function checkRemove(v: unknown[]): RemoveOp {
  if (!isUint(v[1])) throw bad("remove", "seq must be an unsigned integer");
  const ids = v[2];
  if (!Array.isArray(ids) || ids.length > MAX_REMOVE_LIST || !ids.every((id) => typeof id === "string")) {
    throw bad("remove", `ids must be a list of at most ${MAX_REMOVE_LIST} strings`);
  }
  return v as RemoveOp;
}

export function checkSynced(v: unknown[]): SyncedOp {
  const info = v[2] as { messages?: unknown; history?: unknown } | undefined;
  if (!isUint(v[1]) || typeof info !== "object" || info === null || !isUint(info.messages)) {
    throw bad("synced", "expected [seq, {messages}]");
  }
  if (info.history !== undefined && !isHistory(info.history)) throw bad("synced", "history must be [[epoch, index]…]");
  return v as SyncedOp;
}

export function checkReplAck(v: unknown[]): ReplAckOp {
  if (!isUint(v[1])) throw bad("replication ack", "seq must be an unsigned integer");
  return v as ReplAckOp;
}

export function checkInSync(v: unknown[]): InSyncOp {
  const info = v[1] as { inSync?: unknown; epoch?: unknown } | undefined;
  if (typeof info !== "object" || info === null || typeof info.inSync !== "boolean" || !isUint(info.epoch)) {
    throw bad("in-sync", "expected {inSync, epoch}");
  }
  return v as InSyncOp;
}
