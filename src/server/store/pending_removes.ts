/**
 * The rows to delete with the store's next commits (sqlite_store.ts): their positions, the
 * messages they held (for the usage figures), and the index by id told which are going
 * (held_ids.ts: a row whose delete is pending is as good as gone). A commit deletes at most a
 * bounded number of them (MAX_DELETES_PER_COMMIT): the rest wait for the next one.
 */
import type { HeldIds } from "./held_ids.ts";
import type { StoredMessage } from "./store.ts";

export class PendingRemoves {
  /** Positions, in the order removed, and the messages at the same index. */
  seqs: number[] = [];
  messages: StoredMessage[] = [];

  constructor(readonly ids: HeldIds) {}

  get size(): number {
    return this.seqs.length;
  }

  add(seq: number, message: StoredMessage): void {
    this.seqs.push(seq);
    this.messages.push(message);
    this.ids.removing(message.id);
  }

  /** True when a committed row holds a message with this id and its delete is not pending. */
  holds(messageId: string): boolean {
    return this.ids.holds(messageId, this.messages);
  }

  /** A commit deleted the first `count`. */
  committed(count: number): void {
    if (count === 0) return;
    this.ids.deleted(this.messages, count);
    const all = count === this.seqs.length;
    this.seqs = all ? [] : this.seqs.slice(count);
    this.messages = all ? [] : this.messages.slice(count);
  }

  clear(): void {
    this.seqs = [];
    this.messages = [];
    this.ids.clear();
  }
}
