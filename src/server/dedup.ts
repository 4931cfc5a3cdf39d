/**
 * Recognises a message id seen recently, so a send repeated after a reconnect (or arriving
 * through two brokers) is confirmed without being queued twice.
 *
 * Ids in the reference client's form `<prefix>.<base-36 counter>` are tracked per prefix (one
 * per client instance) with a watermark: every counter from the first one seen up to `low` was
 * seen, plus a small set of counters seen above it; a counter below the first one is never taken
 * for seen (a send refused, then accepted after a later one, is a new message here). Arrivals are
 * nearly always in order, so this is a couple of integer operations in a tiny map, where one map
 * of every recent id cost cache misses on each send.
 * Other ids go to a bounded map of recent ids, oldest evicted first.
 *
 * The window is bounded both ways: when a sender leaves more than `MAX_GAPS` counters unseen
 * (refused sends leave gaps), the oldest gaps are treated as seen; and at most `MAX_SENDERS`
 * prefixes and `MAX_OTHER_IDS` other ids are remembered.
 *
 * At start the broker seeds it with the ids its store held newest (`seed`): those are kept
 * exactly, one counter each, since what lies between them (messages acked since, or sends
 * refused) must not be taken for seen; a sender's new ids, above them, cost no lookup.
 */
import { RecentMap } from "../protocol/recent.ts";

const MAX_GAPS = 4096;
const MAX_SENDERS = 10_000;
const MAX_OTHER_IDS = 200_000;
/** `low` of a sender created by `has()` before any id of it was added. */
const UNSET = -2;

interface Sender {
  /**
   * The first counter seen: those below it were never seen here (refused, or sent before this
   * broker knew the sender) and are looked up one by one, in the map of other ids.
   */
  first: number;
  /** Every counter from `first` up to low has been seen. */
  low: number;
  /** Counters > low seen out of order. */
  above: Set<number>;
  /** Counters of this sender's ids given to `seed()`, and the highest of them (-1: none). */
  seeded: Set<number> | null;
  seededMax: number;
}

export class RecentIds {
  readonly #senders = new RecentMap<string, Sender>(MAX_SENDERS);
  readonly #others = new RecentMap<string, true>(MAX_OTHER_IDS);
  /** The sender of the previous id: consecutive ids nearly always share it, saving a lookup. */
  #lastPrefix = "";
  #lastSender: Sender | null = null;

  has(id: string): boolean {
    const dot = id.lastIndexOf(".");
    const counter = counterOf(id, dot);
    if (counter < 0) return this.#others.has(id);
    const sender = this.#sender(id, dot, false);
    if (!sender) return false;
    if (sender.seeded !== null && counter <= sender.seededMax && sender.seeded.has(counter)) return true;
    if (counter < sender.first) return this.#others.has(id);
    return counter <= sender.low || sender.above.has(counter);
  }

  /** Forgets every id: none is taken for seen any more. */
  clear(): void {
    this.#senders.clear();
    this.#others.clear();
    this.#lastPrefix = "";
    this.#lastSender = null;
  }

  /**
   * Ids of messages stored before this start (the store's newest): a sender that resends one it
   * was not told was confirmed (the broker was killed first) is recognized, though the message
   * may be in the store only. Recognized exactly: nothing is inferred from their gaps.
   */
  seed(ids: Iterable<string>): void {
    for (const id of ids) {
      const dot = id.lastIndexOf(".");
      const counter = counterOf(id, dot);
      if (counter < 0) {
        this.#others.set(id, true);
        continue;
      }
      const sender = this.#sender(id, dot, true)!;
      (sender.seeded ??= new Set()).add(counter);
      if (counter > sender.seededMax) sender.seededMax = counter;
    }
  }

  add(id: string): void {
    const dot = id.lastIndexOf(".");
    const counter = counterOf(id, dot);
    if (counter < 0) {
      this.#others.set(id, true);
      return;
    }
    const sender = this.#sender(id, dot, true)!;
    if (sender.low === UNSET) {
      sender.first = counter;
      sender.low = counter - 1;
    }
    if (counter < sender.first) {
      this.#others.set(id, true); // sent again after a later one was accepted: a refused send, say
      return;
    }
    if (counter <= sender.low) return;
    if (counter !== sender.low + 1) {
      sender.above.add(counter);
      if (sender.above.size > MAX_GAPS) this.#forgetOldestGap(sender);
      return;
    }
    sender.low = counter;
    while (sender.above.size > 0 && sender.above.delete(sender.low + 1)) sender.low++;
  }

  #sender(id: string, dot: number, create: boolean): Sender | null {
    if (dot === this.#lastPrefix.length && this.#lastSender && id.startsWith(this.#lastPrefix)) return this.#lastSender;
    const prefix = id.slice(0, dot);
    let sender = this.#senders.get(prefix);
    if (!sender) {
      if (!create) return null;
      sender = { first: 0, low: UNSET, above: new Set(), seeded: null, seededMax: -1 };
      this.#senders.set(prefix, sender); // past MAX_SENDERS, the oldest sender is forgotten
    }
    this.#lastPrefix = prefix;
    this.#lastSender = sender;
    return sender;
  }

  #forgetOldestGap(sender: Sender): void {
    let smallest = Infinity;
    for (const counter of sender.above) if (counter < smallest) smallest = counter;
    sender.low = smallest;
    sender.above.delete(smallest);
    while (sender.above.delete(sender.low + 1)) sender.low++;
  }
}

/** The base-36 counter after the last dot, or -1 when the id is not in that form. */
function counterOf(id: string, dot: number): number {
  const length = id.length - dot - 1;
  if (dot <= 0 || length < 1 || length > 10) return -1;
  let value = 0;
  for (let i = dot + 1; i < id.length; i++) {
    const code = id.charCodeAt(i);
    const digit = code >= 48 && code <= 57 ? code - 48 : code >= 97 && code <= 122 ? code - 87 : -1;
    if (digit < 0) return -1;
    value = value * 36 + digit;
  }
  return value;
}
