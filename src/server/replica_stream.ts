/**
 * What a peer connection streams: the replication stream a master serves it (asked for with SYNC,
 * acknowledged with REPL_ACK, written through the connection's outbox, detached when the connection
 * goes), or a queue move it brings in (MOVE_BEGIN, MOVE_APPEND, MOVE_REMOVE; move/incoming.ts).
 */
import { checkReplAck, checkSync, KittenError, OP } from "../protocol/mod.ts";
import { readAppend } from "../protocol/hot_ops.ts";
import type { Broker } from "./broker.ts";
import type { ReplicaLink } from "./cluster/replica.ts";
import type { ErrorCode } from "../protocol/errors.ts";
import type { Outbox } from "./outbox.ts";
import { IncomingMove } from "./move/incoming.ts";

/** What the stream needs of its session. */
export interface StreamSession {
  readonly clientId: string;
  readonly isPeer: boolean;
  readonly isClosed: boolean;
  /** The connection has frames to write (Broker.markDirty). */
  dirty(): void;
  /** Ends the connection with a coded error. */
  fail(code: ErrorCode, message: string): void;
  /** Confirms a request by ref. */
  confirm(ref: number): void;
  /** Refuses a request by ref (an ERROR with the error's code; INTERNAL, logged, for anything but a KittenError). */
  refuse(ref: number, error: unknown): void;
}

export class ReplicaStream {
  #link: ReplicaLink | null = null;
  #move: IncomingMove | null = null;

  constructor(readonly broker: Broker, readonly session: StreamSession, readonly out: Outbox) {}

  /** A peer asks for the stream: what it lacks from its position (or a snapshot), then the live log. */
  sync(value: unknown[]): void {
    const [, ref, { epoch, position }] = checkSync(value);
    const session = this.session;
    if (!session.isPeer) throw new KittenError("NOT_A_PEER", `Cannot replicate to "${session.clientId}": it did not connect as a peer`);
    session.confirm(ref);
    this.#link ??= this.#open();
    this.broker.cluster.attachReplica(this.#link, epoch, position);
  }

  ack(value: unknown[]): void {
    const [, seq] = checkReplAck(value);
    if (this.#link) this.broker.cluster.replication.ack(this.#link, seq);
  }

  /** A queue move streamed in by the source group's master. */
  move(value: unknown[]): void {
    this.#move ??= this.#incoming();
    this.#move.handle(value);
  }

  /**
   * A MOVE_APPEND read in place (its frame is `data[start, end)`); false when the hand-written
   * reader does not take it, and the generic decoder then names what is wrong.
   */
  moveAppend(data: Uint8Array, start: number, end: number): boolean {
    const append = readAppend(data, start, end, OP.MOVE_APPEND);
    if (append === undefined) return false;
    this.#move ??= this.#incoming();
    try {
      this.#move.append(append);
    } catch (error) {
      this.session.refuse(append[1], error);
    }
    return true;
  }

  #incoming(): IncomingMove {
    const { broker, session, out } = this;
    return new IncomingMove({
      get isPeer() {
        return session.isPeer;
      },
      get clientId() {
        return session.clientId;
      },
      begin: (queue, id, resume) => broker.moves.begin(queue, id, resume),
      traffic: broker.moves.traffic,
      append: (append, delayMs, mayBeHeld) => broker.acceptMoved(append, delayMs, mayBeHeld),
      push: (op) => {
        if (session.isClosed) return;
        out.push(op);
        session.dirty();
      },
      confirm: (ref) => session.confirm(ref),
      refuse: (ref, error) => session.refuse(ref, error),
    });
  }

  /** The socket took what waited: the stream may write more. */
  drained(): void {
    if (this.#link) this.broker.cluster.replication.drained(this.#link);
  }

  detach(): void {
    if (this.#link) this.broker.cluster.replication.detach(this.#link);
  }

  #open(): ReplicaLink {
    const { out, session } = this;
    return {
      peerId: session.clientId,
      get backlogBytes() {
        return out.pendingBytes;
      },
      pushFramed: (bytes) => {
        if (session.isClosed) return;
        out.batch.pushFramed(bytes);
        session.dirty();
      },
      fail: (code, message) => session.fail(code, message),
    };
  }
}
