/**
 * Paging of durable queues to the store (the per-queue state and its rules are in backlog.ts).
 *
 * The broker hands every message it accepts to `accept()`: a message of a durable queue beyond
 * its memory budget stays in the store only; any other goes to the queue. When a queue's memory
 * drops (`settled()`), the oldest paged messages are read back in arrival order, `REFILL_ROWS`
 * per event-loop turn, until the budget is full again, so that consumers find messages in memory
 * ahead of need. At start (`recover()`) every stored message is paged and only a first page is read.
 * A queue nobody receives from lets go of its messages in memory when the broker is quiet after a
 * burst (`releaseIdle()`).
 */
import { MESSAGE_OVERHEAD_BYTES, REFILL_ROWS } from "./backlog.ts";
import type { Logger } from "../log.ts";
import type { Message } from "./message.ts";
import type { Queue } from "./queue.ts";
import type { PagingStore, StoredMessage } from "../store/store.ts";

/**
 * How far past its budget a queue reads when a handler starves (see `starving()`): messages for a
 * served id paged behind more than this many budgets of messages waiting for ids nobody serves
 * wait until those are consumed, expire or overflow.
 */
export const STARVING_BUDGETS = 4;

/** How soon a failed read of paged messages is tried again. */
const REFILL_RETRY_MS = 500;

/**
 * Sends paged (garbage once stored) between two nudges to the garbage collector: about 20 MiB of
 * it, which JavaScriptCore would let pile up to the size of the heap (collector.ts).
 */
export const PAGED_PER_COLLECTION = 50_000;

export interface PagerHost {
  readonly log: Logger;
  /** The queue of that name, created when missing. */
  queue(name: string): Queue;
  /** Puts a message read back from the store into its queue. */
  admit(queue: Queue, record: StoredMessage, recovered: boolean): void;
  /** Delivers what admitting made ready (socket writes). */
  flush(): void;
  /** True once the broker stops: no more reading back (its store is about to close). */
  readonly shuttingDown: boolean;
  /** Runs a full garbage collection, unless the last one was too recent for its cost. */
  collect(): void;
}

export class Pager {
  #pagedSinceCollection = 0;

  constructor(readonly store: PagingStore, readonly host: PagerHost) {}

  /**
   * Takes a message the broker accepted for a durable queue: true when it stays in the store only
   * (the caller must not route it), false when the queue must take it.
   */
  page(queue: Queue, message: Message): boolean {
    const backlog = queue.backlog;
    if (backlog.count === 0) queue.syncBacklog();
    if (!backlog.mustPage(message.body.length, queue.settings.memoryBudgetBytes)) return false;
    const position = this.store.positionOf(message.record ?? message);
    if (position === undefined) return false; // not stored (the store refused it): memory is all it has
    if (backlog.count === 0) backlog.from = position;
    backlog.last = position;
    backlog.count++;
    queue.counters.received++;
    if (++this.#pagedSinceCollection >= PAGED_PER_COLLECTION) {
      this.#pagedSinceCollection = 0;
      this.host.collect();
    }
    // Paged messages count towards maxItemsInQueue: the oldest waiting copies may have to go.
    if (backlog.bounded > 0 && queue.settings.maxItemsInQueue !== Infinity) {
      queue.trimWaiting();
      if (backlog.bounded > queue.settings.maxItemsInQueue) this.settled(queue);
    }
    return true;
  }

  /**
   * A message of the queue left memory, or a handler of it found nothing ready: read paged ones
   * back when memory (not counting deliveries in flight) is low enough.
   */
  settled(queue: Queue): void {
    queue.syncBacklog();
    if (!queue.backlog.wantsRefill(queue.settings.memoryBudgetBytes)) return;
    queue.backlog.refilling = true;
    setImmediate(() => this.#refillTurn(queue, queue.settings.memoryBudgetBytes));
  }

  /**
   * A handler could take more and nothing in memory is for it, while messages are paged: memory
   * may be full of messages waiting for ids nobody serves, with its messages behind them on
   * disk. It reads on past the budget, up to STARVING_BUDGETS times it, to reach them.
   */
  starving(queue: Queue): void {
    queue.syncBacklog();
    const budget = queue.settings.memoryBudgetBytes * STARVING_BUDGETS;
    if (!queue.backlog.wantsRefill(budget)) return;
    queue.backlog.refilling = true;
    setImmediate(() => this.#refillTurn(queue, budget));
  }

  /**
   * Leaves in the store only the messages of a durable queue nobody receives from (see
   * Queue.idleMessages()), as if paged: the broker calls it once it is quiet after a burst, so
   * that messages that wait for a consumer do not keep the memory they were allocated in among
   * the burst's garbage. A recipient that registers reads them back (`starving()`). Returns how
   * many went; 0 when the queue does not qualify.
   */
  releaseIdle(queue: Queue): number {
    const backlog = queue.backlog;
    // A ttl is kept on time in memory only: a paged message expires when it is read back.
    if (queue.settings.durability === "memory" || queue.settings.ttl !== null || backlog.refilling || backlog.recovered > 0) return 0;
    const messages = queue.idleMessages();
    if (messages === null) return 0;
    // Every one stored, in store order, and older than those paged already: else they stay.
    let first = -1;
    let newest = -1;
    for (const message of messages) {
      const position = this.store.positionOf(message.record ?? message);
      if (position === undefined || position <= newest) return 0;
      if (first < 0) first = position;
      newest = position;
    }
    if (backlog.count > 0 && newest >= backlog.from) return 0;
    if (backlog.count === 0) backlog.last = newest;
    backlog.from = first;
    backlog.count += queue.release();
    return messages.length;
  }

  /** Deletes a queue's paged rows (of one destination id, or all) from the store; returns how many. */
  purge(queue: Queue, destination?: string): number {
    const backlog = queue.backlog;
    if (backlog.count === 0) return 0;
    const purged = this.store.purgeFrom(queue.name, backlog.from, destination);
    backlog.count = destination === undefined ? 0 : Math.max(0, backlog.count - purged);
    backlog.recovered = Math.min(backlog.recovered, backlog.count);
    return purged;
  }

  /**
   * At start: every stored message is paged (the store knows each queue's count without reading
   * the rows), then each queue reads its first page, so a restart costs one page per queue,
   * whatever the size of the backlog.
   */
  recover(): number {
    let total = 0;
    for (const [name, usage] of this.store.usage()) {
      const queue = this.host.queue(name);
      const backlog = queue.backlog;
      backlog.count = usage.messages;
      backlog.recovered = usage.messages;
      backlog.from = 0;
      backlog.last = this.store.lastPosition(name);
      queue.counters.received += usage.messages;
      total += usage.messages;
      this.refill(queue, REFILL_ROWS);
      this.settled(queue); // the rest of the budget, a page per turn
    }
    return total;
  }

  /** Reads up to `rows` paged messages back (fewer when the budget fills first). */
  refill(queue: Queue, rows: number, budget = queue.settings.memoryBudgetBytes): void {
    const backlog = queue.backlog;
    queue.syncBacklog();
    while (rows > 0 && backlog.count > 0 && backlog.waitingBytes < budget) {
      // No more rows than could fit were their bodies empty: a small budget reads a few at a time.
      const fit = Math.ceil((budget - backlog.waitingBytes) / MESSAGE_OVERHEAD_BYTES);
      const records = this.store.readQueue(queue.name, backlog.from, Math.min(rows, backlog.count, REFILL_ROWS, fit));
      if (records.length === 0) {
        // The rows are gone (removed by something other than a settle): nothing left to read.
        this.host.log.error("store", `queue=${queue.name};paged=${backlog.count};paged messages not found in the store;forgotten`);
        backlog.count = 0;
        backlog.recovered = 0;
        return;
      }
      for (const record of records) {
        backlog.from = this.store.positionOf(record)! + 1;
        backlog.count--;
        const recovered = backlog.recovered > 0;
        if (recovered) backlog.recovered--;
        rows--;
        this.host.admit(queue, record, recovered);
      }
      queue.syncBacklog();
    }
  }

  #refillTurn(queue: Queue, budget: number): void {
    queue.backlog.refilling = false;
    if (this.host.shuttingDown) return;
    try {
      this.refill(queue, REFILL_ROWS, budget);
      this.host.flush();
    } catch (error) {
      // A failing disk: tried again a little later, not on every turn.
      this.host.log.failure("store", `queue=${queue.name};reading paged messages failed, retrying`, error);
      queue.backlog.refilling = true;
      setTimeout(() => this.#refillTurn(queue, budget), REFILL_RETRY_MS).unref();
      return;
    }
    // Still below the budget: the next page on the next turn (sockets get theirs in between).
    queue.syncBacklog();
    if (queue.backlog.count > 0 && queue.backlog.waitingBytes < budget) {
      queue.backlog.refilling = true;
      setImmediate(() => this.#refillTurn(queue, budget));
    }
  }
}
