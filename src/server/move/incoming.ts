/**
 * A queue move, on the target group's master: what one peer connection (the source's master)
 * streams in. MOVE_BEGIN is taken only for the move etcd records (state copying, this group as
 * target); each MOVE_APPEND is stored and replicated like a send (admission.ts, admitMoved), and
 * MOVE_REMOVE drops what the source settled. MOVE_ACK tells the source how far everything is held
 * here and on the in-sync replicas, in order: the source fences the queue and switches ownership
 * only once the target holds all it streamed.
 *
 * The queue takes no registrations meanwhile (another group owns it: NOT_OWNER), so nothing is
 * delivered before the switch. If the move is rolled back, the queue is dropped here (moves.ts).
 */
import { checkAppend, checkMoveBegin, checkRemove, KittenError, moveDelayOf, OP } from "../../protocol/mod.ts";
import type { Mirror } from "../cluster/mirror.ts";
import { TrafficBaseline, type TrafficMeter } from "./traffic.ts";
import { mayOutliveItsWaiters } from "../internal/promises.ts";

export interface IncomingHost {
  /**
   * Opens the queue for the move (waits a moment for its record to reach this broker); throws
   * MOVE_REFUSED. `resume`: the source links again, and what this broker holds of the queue stays.
   */
  begin(queue: string, move: string, resume: boolean): Promise<Mirror>;
  /** Stores a streamed message (a promise while its commit and replication run); `delayMs`: a delayed requeue's wait left. */
  /** `mayBeHeld`: written again after the source linked again (the queue may hold it in its store only). */
  append(value: ReturnType<typeof checkAppend>, delayMs: number, mayBeHeld: boolean): void | Promise<void>;
  /** This broker's client traffic: each MOVE_ACK tells the source how much of it is left (pacer.ts). */
  readonly traffic: TrafficMeter;
  /** The connection is a peer broker (hello.peer): only a peer may stream a move. */
  readonly isPeer: boolean;
  readonly clientId: string;
  /** Writes a frame to the source. */
  push(op: unknown[]): void;
  /** Answers a request by ref (OK), or refuses it. */
  confirm(ref: number): void;
  refuse(ref: number, error: KittenError): void;
}

export class IncomingMove {
  #queue: string | null = null;
  #mirror: Mirror | null = null;
  /** Commits of earlier entries: an entry is acknowledged once every one before it is held. */
  #commits: Promise<unknown> = Promise.resolve();
  #pending = 0;
  /** The entries read in this turn of the event loop: the highest seq, and the commits it waits for. */
  #turn: { seq: number; stored: Promise<void>[] } | null = null;
  #failed = false;
  /** The entries up to this seq are written again after the source linked again (MOVE_BEGIN's `resume`). */
  #resentThrough = 0;
  /** The client traffic here before the move began. */
  #traffic: TrafficBaseline | null = null;

  constructor(readonly host: IncomingHost) {}

  handle(value: unknown[]): void {
    this.#checkPeer();
    switch (value[0]) {
      case OP.MOVE_BEGIN: {
        const [, ref, { queue, move, resume }] = checkMoveBegin(value);
        this.#resentThrough = resume ?? 0;
        this.host.begin(queue, move, resume !== undefined).then(
          (mirror) => {
            this.#queue = queue;
            this.#mirror = mirror;
            this.#traffic = new TrafficBaseline(this.host.traffic);
            this.host.confirm(ref);
          },
          (error: KittenError) => this.host.refuse(ref, error),
        );
        return;
      }
      case OP.MOVE_APPEND:
        return this.append(checkAppend(value), moveDelayOf(value));
      case OP.MOVE_REMOVE: {
        const [, seq, ids] = checkRemove(value);
        const mirror = this.#mirror;
        if (mirror) {
          // One still being stored, or paged to the store, goes when it reaches memory.
          for (const id of ids) if (!mirror.removed(id)) mirror.removeLater(id);
        }
        return this.#acknowledge(seq, undefined);
      }
    }
  }

  /** Stores a MOVE_APPEND (read by hand, or checked after the generic decoder). */
  append(append: ReturnType<typeof checkAppend>, delayMs = 0): void {
    this.#checkPeer();
    this.#check(append[3]);
    let stored: void | Promise<void>;
    try {
      stored = this.host.append(append, delayMs, append[1] <= this.#resentThrough);
    } catch (error) {
      // Refused (a full disk, too few replicas): nothing after it is acknowledged, whatever the
      // entries behind it in the same read do; the source rolls the move back on the ERROR.
      this.#failed = true;
      throw error;
    }
    this.#acknowledge(append[1], stored);
  }

  #checkPeer(): void {
    if (!this.host.isPeer) {
      throw new KittenError("NOT_A_PEER", `Cannot take a queue move from "${this.host.clientId}": it did not connect as a peer broker`);
    }
  }

  #check(queue: string): void {
    if (this.#queue === null || this.#mirror === null) {
      throw new KittenError("MOVE_REFUSED", `Cannot take messages of "${queue}": no move was begun on this connection`);
    }
    if (queue !== this.#queue) {
      throw new KittenError("MOVE_REFUSED", `Cannot take messages of "${queue}": this connection moves "${this.#queue}"`);
    }
  }

  /**
   * Acknowledges `seq` once it and everything before it is held. The entries of one read (a socket
   * chunk holds hundreds) share one wait and one MOVE_ACK: the source needs the highest only.
   */
  #acknowledge(seq: number, stored: void | Promise<void>): void {
    if (this.#failed) {
      if (stored) mayOutliveItsWaiters(stored); // refused already: nothing waits for this commit
      return;
    }
    if (stored === undefined && this.#pending === 0 && this.#turn === null) return this.#ack(seq);
    if (this.#turn === null) {
      this.#turn = { seq, stored: [] };
      queueMicrotask(() => this.#endTurn());
    }
    this.#turn.seq = seq;
    if (stored !== undefined) this.#turn.stored.push(stored);
  }

  #ack(seq: number): void {
    const ratio = this.#traffic?.ratio() ?? null;
    this.host.push([OP.MOVE_ACK, seq, ratio === null ? null : Math.round(ratio * 100) / 100]);
  }

  #endTurn(): void {
    const { seq, stored } = this.#turn!;
    this.#turn = null;
    this.#pending++;
    this.#commits = Promise.all([this.#commits, ...stored]).then(
      () => {
        this.#pending--;
        if (!this.#failed) this.#ack(seq);
      },
      (error: KittenError) => {
        this.#pending--;
        if (this.#failed) return;
        this.#failed = true;
        // The source rolls the move back on this refusal (or links again, for one that waiting
        // fixes: its code is kept): nothing it streamed after the last MOVE_ACK counts as held.
        const code = error instanceof KittenError ? error.code : "MOVE_REFUSED";
        this.host.refuse(seq, new KittenError(code, `Cannot hold a message of "${this.#queue}": ${error.message}`));
      },
    );
  }
}
