/**
 * The deliveries of one queue: the copies in flight at each handler until acked or past their ack
 * deadline, and the nacked copies delayed until they are due. Bookkeeping only: which handler gets
 * a copy is the groups' (groups.ts), what becomes of a copy that comes back is the queue's.
 */
import { MinHeap } from "../internal/heap.ts";
import { type Copy, CopyState, type Handler, type Pool } from "./message.ts";

let nextTag = 1;

export class Deliveries {
  /** Copies in flight, across every handler. */
  inflight = 0;
  /**
   * Registered handlers. Ack timeouts scan each one's `inflight` map, which iterates in delivery
   * order, that is deadline order: no second per-delivery index to maintain on the hot path.
   */
  readonly #handlers = new Set<Handler>();
  readonly #delayed = new MinHeap<Copy>();

  add(handler: Handler): void {
    this.#handlers.add(handler);
  }

  delete(handler: Handler): void {
    this.#handlers.delete(handler);
  }

  /** The registered handlers, in registration order (the order ack timeouts visit them). */
  get handlers(): ReadonlySet<Handler> {
    return this.#handlers;
  }

  /** The registered handlers, earliest registrant first. */
  bySeq(): Handler[] {
    return [...this.#handlers].sort((a, b) => a.seq - b.seq);
  }

  /** True while a copy is in flight or delayed: the broker's timer must keep visiting the queue. */
  get hasTimers(): boolean {
    return this.inflight > 0 || this.#delayed.length > 0;
  }

  // ── in flight ──────────────────────────────────────────────────────────────────────────────

  /** Puts a copy of `pool` in flight at `handler`, to be acked by `deadline` (ms). */
  start(copy: Copy, pool: Pool, handler: Handler, deadline: number): void {
    copy.state = CopyState.INFLIGHT;
    copy.handler = handler;
    copy.deliveries++;
    copy.tag = nextTag++;
    copy.at = deadline;
    handler.inflight.set(copy.tag, copy);
    pool.group.cursor = handler.seq;
    this.inflight++;
  }

  /** The copy is no longer in flight (acked, or taken back from its handler). */
  end(copy: Copy): void {
    copy.handler!.inflight.delete(copy.tag);
    this.inflight--;
  }

  /** The copies in flight at `handler` whose ack deadline is past, in delivery order (null: none). */
  overdue(handler: Handler, now: number): Copy[] | null {
    if (handler.inflight.size === 0) return null;
    const due: Copy[] = [];
    for (const copy of handler.inflight.values()) {
      // After a reload that shortens requeueInterval, later deliveries may be due before this
      // one; they are then handled at most one old interval late, keeping this O(due).
      if (copy.at > now) break;
      due.push(copy);
    }
    return due.length === 0 ? null : due;
  }

  // ── delayed ────────────────────────────────────────────────────────────────────────────────

  /** Keeps a copy aside until `at` (ms). */
  delay(copy: Copy, at: number): void {
    copy.state = CopyState.DELAYED;
    copy.at = at;
    this.#delayed.push(copy);
  }

  /**
   * Removes and returns the delayed copies due at or before `now`, earliest first. A copy settled
   * meanwhile (purged) is among them, no longer DELAYED.
   */
  popDue(now: number): Copy[] {
    return this.#delayed.popDue(now);
  }

  /** The copies still delayed, in heap order. */
  *delayed(): Generator<Copy> {
    for (const copy of this.#delayed) if (copy.state === CopyState.DELAYED) yield copy;
  }
}
