/**
 * Operations of a queue move (PROTOCOL.md, "Moving a queue"): the source group's master connects to
 * the target group's master as a peer and streams the queue to it while it keeps serving.
 *
 * - `[MOVE_BEGIN, ref, {queue, move, resume?}]`: the target takes the queue in, as `move` (the id of
 *   the move record in etcd) says; answered with OK, or ERROR MOVE_REFUSED. `resume` (a seq): the
 *   source's link to this group's master ended during the snapshot, and it links again: the
 *   target keeps what it holds of the queue (what its group's master before it replicated), and
 *   the source writes again what it had not acknowledged; entries up to `resume` may be held.
 * - `[MOVE_APPEND, seq, …, delay?]`: a message of the queue, the fields of APPEND (peer_ops.ts): its
 *   id, queue, destination, body, created, deliveries and dead-letter information; then, for a
 *   message nacked with a delay on the source, the ms it still has to wait (sent again at the
 *   fence for a message the target holds already: the delay applies to it).
 * - `[MOVE_REMOVE, seq, [messageId, …]]`: messages settled on the source (acked, dead, expired).
 * - `[MOVE_ACK, seq, traffic]` (target → source): everything up to `seq` is stored on the target and
 *   on its in-sync replicas, and removals up to it are applied. `traffic` (optional): the target's
 *   client traffic now over what it was before the move (1: unchanged), or null when it has too
 *   little to tell; the source slows the snapshot down when it falls (server/move/pacer.ts).
 *
 * `seq` rises by one per APPEND or REMOVE on one link.
 */
import { KittenError } from "./errors.ts";
import type { OP } from "./ops.ts";

export type MoveBeginOp = [typeof OP.MOVE_BEGIN, number, { queue: string; move: string; resume?: number }];
export type MoveAckOp = [typeof OP.MOVE_ACK, number, (number | null)?];

function bad(op: string, detail: string): KittenError {
  return new KittenError("BAD_REQUEST", `Cannot read ${op}: ${detail}`);
}

export function checkMoveBegin(v: unknown[]): MoveBeginOp {
  const info = v[2] as { queue?: unknown; move?: unknown; resume?: unknown } | undefined;
  if (typeof v[1] !== "number" || !Number.isSafeInteger(v[1]) || v[1] < 0) throw bad("move-begin", "ref must be an unsigned integer");
  if (typeof info !== "object" || info === null || typeof info.queue !== "string" || typeof info.move !== "string") {
    throw bad("move-begin", "expected {queue, move}");
  }
  if (info.resume !== undefined && (typeof info.resume !== "number" || !Number.isSafeInteger(info.resume) || info.resume < 0)) {
    throw bad("move-begin", "resume must be an unsigned integer (a seq)");
  }
  return v as MoveBeginOp;
}

/** The delay of a MOVE_APPEND (its tenth field), in ms; 0 when it has none. */
export function moveDelayOf(v: unknown[]): number {
  const delay = v[9];
  if (delay === undefined || delay === null) return 0;
  if (typeof delay !== "number" || !Number.isSafeInteger(delay) || delay < 0) throw bad("move-append", "delay must be an unsigned integer (ms)");
  return delay;
}

export function checkMoveAck(v: unknown[]): MoveAckOp {
  if (typeof v[1] !== "number" || !Number.isSafeInteger(v[1]) || v[1] < 0) throw bad("move-ack", "seq must be an unsigned integer");
  const traffic = v[2];
  if (traffic !== undefined && traffic !== null && (typeof traffic !== "number" || !Number.isFinite(traffic) || traffic < 0)) {
    throw bad("move-ack", "traffic must be a number of at least 0, or null");
  }
  return v as MoveAckOp;
}
