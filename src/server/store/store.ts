/**
 * The store interface: what the broker needs from persistence, and nothing more. The memory
 * store implements it for `durability: "memory"`; the durable store (bun:sqlite) replaces it
 * without the queue engine noticing.
 */
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
}

export interface Store {
  /**
   * Records a message. Returns when the message is safe by the store's standard: at once for
   * memory, after the commit that holds it for a durable store (then a promise).
   */
  append(message: StoredMessage, mode?: "fsync" | "batch"): void | Promise<void>;
  /** Forgets a message whose every copy is settled (acked or dead); given the appended object. */
  remove(message: StoredMessage): void;
  /** Every message not yet removed, in arrival order (recovery at start). */
  load(): StoredMessage[];
  /** A small durable value (`epoch`), or null. */
  meta(key: string): string | number | null;
  /** Writes a small value, on disk when this returns. */
  setMeta(key: string, value: string | number): void;
  /** Flushes what is pending and releases resources. */
  close(): void | Promise<void>;
}
