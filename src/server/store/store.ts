/**
 * The store interface: what the broker needs from persistence, and nothing more. The durable
 * store (bun:sqlite) implements it; a broker whose every queue is in memory has none. The memory
 * store implements it for tests, without the queue engine noticing the difference.
 */
import type { DeadLetterInfo } from "../../protocol/ops.ts";
import type { KittenError } from "../../protocol/errors.ts";

/** When a stored message counts as safe: after the commit holding it (fsync), or at once (batch). */
export type DurableMode = "fsync" | "batch";

export interface StoredMessage {
  /** Globally unique id chosen by the sender. */
  id: string;
  /** Queue name `endpoint/version`. */
  queue: string;
  /** The id the message was sent to (`*` for a broadcast). */
  destination: string;
  /** The body exactly as the sender encoded it. */
  body: Uint8Array;
  /** Arrival time, ms since epoch. */
  created: number;
  /**
   * Times a copy of it was handed to a consumer, the highest over its copies (default 0). Given
   * to `append` it is the count to store (a recovered message redelivered); `load()` returns the
   * highest count noted by `noteDelivery` (0 when none was).
   */
  deliveries?: number;
  /** Set on a message a dead-letter queue received: why it died and where it came from. */
  deadLetter?: StoredDeadLetter | null;
  /**
   * When its delayed requeue is due, ms since epoch (0 or absent: none). Given to `append` it is
   * stored with the message (one that came delayed with a move); `load()` and `readQueue` return
   * the latest noted by `noteDelay`, so a restart keeps a nack's delay.
   */
  notBefore?: number;
  /**
   * Written by a store that keeps positions (the durable one): the message's row while it is
   * stored, undefined once removed. A field, not a map of the store's, because a map entry per
   * message held in memory cost more than the rest of the message's bookkeeping.
   */
  position?: number | undefined;
}

/** Dead-letter information kept with a message (store format v2): the map DELIVER carries. */
export type StoredDeadLetter = DeadLetterInfo;

export interface Store {
  /**
   * Records a message. Returns when the message is safe by the store's standard: at once for
   * memory, after the commit that holds it for a durable store (then a promise).
   */
  append(message: StoredMessage, mode?: DurableMode): void | Promise<void>;
  /** Forgets a message whose every copy is settled (acked or dead); given the appended object. */
  remove(message: StoredMessage): void;
  /**
   * A copy of a message was handed to a consumer for the `deliveries`-th time; given the appended
   * (or loaded) object, like `remove`. Hot path: the durable store only remembers the highest
   * count per message and writes it with its next commit; a message removed before that costs no
   * write at all. Messages the store does not hold are ignored.
   */
  noteDelivery(message: StoredMessage, deliveries: number): void;
  /**
   * A copy of a message was nacked with a delay, due at `notBefore` (ms since epoch), after
   * `deliveries` deliveries; given the appended (or loaded) object, like `remove`. The durable
   * store writes both with its next commit (a nack is rarer than a delivery: no window, so a
   * restart counts the nacked delivery too); the latest delay noted wins, the highest count.
   * Messages the store does not hold are ignored.
   */
  noteDelay(message: StoredMessage, notBefore: number, deliveries?: number): void;
  /** Every message not yet removed, in arrival order (recovery at start), with `deliveries`, `deadLetter` and `notBefore` set. */
  load(): StoredMessage[];
  /**
   * The ids of the `limit` newest messages stored, oldest first: read at start, so that the broker
   * recognizes a resend of one whose confirmation a crash kept from its sender.
   */
  newestIds?(limit: number): string[];
  /** A small durable value (`epoch`), or null. */
  meta(key: string): string | number | null;
  /** Writes a small value, on disk when this returns (and a value waiting for the next commit under that key is dropped). */
  setMeta(key: string, value: string | number): void;
  /**
   * Writes a small value with the next commit, which this asks for within `commitIntervalMs`: not
   * on disk when this returns, and lost by a crash before that commit (for values that may be
   * older after a crash, such as a lower bound). The latest value given for a key wins.
   */
  setMetaWithNextCommit(key: string, value: string | number): void;
  /** Flushes what is pending and releases resources. */
  close(): void | Promise<void>;
  /**
   * Why a durable send to `channel` is refused now, or null: asked before the send is streamed
   * to replicas, so that a refusal costs them nothing. `append` refuses the same on its own.
   */
  refusal?(channel: string): KittenError | null;
  /** One bounded step of housekeeping that gives disk space back; the broker's tick calls it. */
  reclaim?(): void;
}

/** One queue's share of a store: rows and estimated bytes on disk. */
export interface QueueUsage {
  messages: number;
  bytes: number;
}

/**
 * A store the broker can page to: it keeps messages the broker holds no copy of, and reads a
 * queue's messages back in arrival order. The durable store is one; the memory store is not
 * (the broker then keeps every message in memory, as it must anyway).
 */
export interface PagingStore extends Store {
  /** The store's position (arrival order) of a message appended or read, while stored. */
  positionOf(message: StoredMessage): number | undefined;
  /**
   * Up to `limit` stored messages of `queue` at or after `from`, in arrival order, with
   * `deliveries`, `deadLetter` and `notBefore` set; `positionOf` knows them, `remove` and `noteDelivery`
   * accept them. Only committed messages are read (a pending batch-mode append is committed first).
   */
  readQueue(queue: string, from: number, limit: number): StoredMessage[];
  /**
   * The position of the newest committed message of `queue` (0 when none): every message
   * committed later has a higher one, and so has every append still pending now.
   */
  lastPosition(queue: string): number;
  /**
   * Deletes the stored messages of `queue` at or after position `from` (of one destination id, or
   * all), committed when this returns; returns how many. An operator's purge of paged messages.
   */
  purgeFrom(queue: string, from: number, destination?: string): number;
  /** Every queue with stored messages. */
  usage(): Map<string, QueueUsage>;
  /** True when a committed message with this id is stored. */
  holds(messageId: string): boolean;
  /** One queue's share (zeros when it has nothing stored). */
  queueUsage(queue: string): QueueUsage;
  /**
   * Every stored message in arrival order, read lazily (what `load()` returns, without holding it
   * all): for a peer that must receive every live message of a big store.
   */
  scan(): IterableIterator<StoredMessage>;
}

export function canPage(store: Store | null): store is PagingStore {
  return store !== null && typeof (store as Partial<PagingStore>).readQueue === "function";
}
