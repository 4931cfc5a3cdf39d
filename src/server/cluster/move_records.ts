/**
 * Queue moves as etcd records (`<prefix>moves/<endpoint>/<version>`), one per queue: the move in
 * progress, or the last one, finished or rolled back. Every change is a transaction that compares
 * the record's mod revision, so two brokers acting on one move (the source finishing it, another
 * rolling it back) cannot both win. The switch of ownership is the one transaction that writes
 * the map entry and the record's "done" together, and only while the source group's leader key
 * still has the epoch the move started with: a source master that lost its lease cannot switch.
 */
import type { Namespace } from "etcd3";
import { KittenError } from "../../protocol/errors.ts";

export const MOVES = "moves/";

export type MoveState = "copying" | "done" | "rolled-back";
/** Where a move that is copying stands (reported only). */
export type MovePhase = "starting" | "snapshot" | "live" | "fenced";

export interface MoveRecord {
  /** Unique per move of this queue. */
  id: string;
  queue: string;
  from: string;
  to: string;
  /** The source group's leader epoch when the move was asked for: only that master may switch. */
  sourceEpoch: number;
  state: MoveState;
  phase: MovePhase;
  /** Why it was rolled back. */
  reason?: string;
  /** Messages the source has streamed to the target so far (snapshot and live). */
  copied: number;
  /** Messages the snapshot holds. */
  snapshot: number;
  /** How long sends to the queue were held at the switch, in ms (once done). */
  fenceMs?: number;
  /** Bytes streamed to the target (frames of the move link). */
  bytes?: number;
  /** Deliveries in flight on the source at the switch: the target delivers them again (duplicates). */
  redelivered?: number;
  /** The broker that asked for it (serviceId). */
  requestedBy: string;
  requestedAt: number;
  /** Last progress written by the source: a copying move with no progress for 30 s is rolled back. */
  updatedAt: number;
  finishedAt?: number;
  /** The record's mod revision in etcd (not stored: read with it). */
  revision: number;
}

/** A new move of `queue` from `from` (its master at `sourceEpoch`) to `to`, asked for by `requestedBy` at `now`. */
export function newMove(queue: string, from: string, to: string, sourceEpoch: number, requestedBy: string, now: number): MoveRecord {
  return {
    id: `${now.toString(36)}-${Math.random().toString(36).slice(2, 8)}`,
    queue,
    from,
    to,
    sourceEpoch,
    state: "copying",
    phase: "starting",
    copied: 0,
    snapshot: 0,
    requestedBy,
    requestedAt: now,
    updatedAt: now,
    revision: 0,
  };
}

/** What is stored: the record without its revision. */
function stored(record: MoveRecord): string {
  const { revision: _revision, ...fields } = record;
  return JSON.stringify(fields);
}

export function parseMoveRecord(text: string, revision: number): MoveRecord | null {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return null;
  }
  if (value === null || typeof value !== "object") return null;
  const record = value as Partial<MoveRecord>;
  if (typeof record.id !== "string" || typeof record.queue !== "string" || typeof record.from !== "string" ||
    typeof record.to !== "string" || typeof record.sourceEpoch !== "number" || typeof record.state !== "string") {
    return null;
  }
  return { ...(record as MoveRecord), revision };
}

function unavailable(action: string, queue: string, error: unknown): KittenError {
  return new KittenError("STORE_UNAVAILABLE", `Cannot ${action} the move of "${queue}": etcd did not answer: ${(error as Error).message}`);
}

/**
 * Writes a new move record, only if the queue's map entry is still at `mapRevision` and the
 * record is still at `recordRevision` (0: none). Returns the record with its revision, or null when
 * either changed meanwhile.
 */
export async function createMove(keys: Namespace, record: MoveRecord, mapRevision: number, recordRevision: number): Promise<MoveRecord | null> {
  try {
    const result = await keys.if(`queues/${record.queue}`, "Mod", "==", mapRevision)
      .and(MOVES + record.queue, "Mod", "==", recordRevision)
      .then(keys.put(MOVES + record.queue).value(stored(record)))
      .commit();
    return result.succeeded ? { ...record, revision: Number(result.header.revision) } : null;
  } catch (error) {
    throw unavailable("record", record.queue, error);
  }
}

/** Rewrites a record still at its revision; null when another broker changed it first. */
export async function updateMove(keys: Namespace, record: MoveRecord, changes: Partial<MoveRecord>): Promise<MoveRecord | null> {
  const next = { ...record, ...changes };
  try {
    const result = await keys.if(MOVES + record.queue, "Mod", "==", record.revision)
      .then(keys.put(MOVES + record.queue).value(stored(next)))
      .commit();
    return result.succeeded ? { ...next, revision: Number(result.header.revision) } : null;
  } catch (error) {
    throw unavailable("update", record.queue, error);
  }
}

/**
 * The switch: the map entry names the target and the record says done, in one transaction, only
 * if the record is unchanged and the source group's leader key was created at `sourceEpoch`.
 */
export async function switchOwner(keys: Namespace, record: MoveRecord, changes: Partial<MoveRecord>): Promise<MoveRecord | null> {
  const done = { ...record, ...changes, state: "done" as const };
  try {
    const result = await keys.if(MOVES + record.queue, "Mod", "==", record.revision)
      .and(`groups/${record.from}/leader`, "Create", "==", record.sourceEpoch)
      .then(
        keys.put(`queues/${record.queue}`).value(JSON.stringify({ group: record.to })),
        keys.put(MOVES + record.queue).value(stored(done)),
      )
      .commit();
    return result.succeeded ? { ...done, revision: Number(result.header.revision) } : null;
  } catch (error) {
    throw unavailable("switch", record.queue, error);
  }
}
