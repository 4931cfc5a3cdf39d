/**
 * What a durable queue keeps of its messages in memory, and what it leaves in the store.
 *
 * A durable queue holds at most `memoryBudgetBytes` of messages in memory (`resident`, body plus
 * `MESSAGE_OVERHEAD_BYTES` each), not counting those in flight (bounded by prefetch). Beyond it, a
 * message the store has committed is not routed at all: it is counted here (`count`) and left in
 * the store, and from then on every newer message of the queue goes the same way, so that the
 * messages in memory are always older than the paged ones and FIFO order holds across the boundary. As consumers settle messages and memory drops
 * below `REFILL_BELOW` of the budget, the broker reads the oldest paged ones back (`from` is the
 * store position where the next read starts) and routes them as if they arrived then.
 *
 * Messages stored before a restart start out paged, all of them: a restart reads one budget's
 * worth, not the whole backlog. They keep what a recovered message has (outside the waiting bound,
 * see Queue.restore()) through `recovered`: the first `recovered` of the paged ones are those.
 */

/**
 * Memory one message costs beyond its body while it is in a queue, as measured by
 * scripts/message_memory.ts (JavaScript heap, docs/durability.md): the Message (80 bytes) and its
 * Copy (80), the id string, the body's typed-array header, and its slot in the waiting list or in
 * its consumer's ready queue: 280–300 bytes, the most expensive case counted.
 */
export const MESSAGE_OVERHEAD_BYTES = 300;

/** Paged messages are read back when memory drops below this share of the budget. */
export const REFILL_BELOW = 0.75;

/** Rows read per event-loop turn while refilling: a few ms of SQLite, then sockets get their turn. */
export const REFILL_ROWS = 2000;

export class Backlog {
  /** Messages of the queue left in the store, not in memory (the newest ones). */
  count = 0;
  /** Of them, the oldest `recovered` were stored before this start. */
  recovered = 0;
  /** Store position where the next read of paged messages starts. */
  from = 0;
  /**
   * Store position of the newest paged message: the paged ones are the rows of the queue from
   * `from` to here (a snapshot lists those; newer rows come through the live stream).
   */
  last = 0;
  /** Bytes the queue's messages in memory cost (bodies plus overhead). */
  resident = 0;
  /** A refill is scheduled for the next event-loop turn. */
  refilling = false;

  /** Paged messages that count towards `maxItemsInQueue` (the recovered ones do not). */
  get bounded(): number {
    return this.count - this.recovered;
  }

  /**
   * Messages in flight (the queue's in-flight deliveries and its live messages, set by the queue):
   * they are bounded by each handler's prefetch, not by the budget, so the budget counts only the
   * messages that wait in memory. A consumer with a large prefetch that acks late must not stop
   * the queue from reading its next messages.
   */
  inflight = 0;
  live = 0;

  /** Bytes of the messages in memory that are not in flight (estimated by the average message). */
  get waitingBytes(): number {
    if (this.inflight === 0 || this.live === 0) return this.resident;
    return this.resident - (this.resident / this.live) * Math.min(this.inflight, this.live);
  }

  /** True when a new message of this size must stay in the store only. */
  mustPage(bodyBytes: number, budget: number): boolean {
    return this.count > 0 || this.waitingBytes + bodyBytes + MESSAGE_OVERHEAD_BYTES > budget;
  }

  /** True when paged messages should be read back now. */
  wantsRefill(budget: number): boolean {
    return this.count > 0 && !this.refilling && this.waitingBytes < budget * REFILL_BELOW;
  }
}

export function residentCost(message: { body: Uint8Array }): number {
  return message.body.length + MESSAGE_OVERHEAD_BYTES;
}
