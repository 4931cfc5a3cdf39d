/**
 * The deliveries a client of several brokers acked recently, the last ACKED_WINDOW of them, to
 * recognise one a failover delivers again. A broker never delivers again what was acked on the
 * same link, so only deliveries through another link can repeat an acked one: after a failover or
 * a reconnect. The acks are kept in a ring; they are looked up by message id (a map, made from the
 * ring) only from such a change until ACKED_WINDOW acks later, when every ack remembered was made
 * on the link that delivers now. So a client whose link does not change pays four array writes
 * per ack, not four map operations.
 *
 * The ring is four arrays of fields rather than an array of objects: each ack lives for
 * ACKED_WINDOW acks, long enough for the collector to move it to the old generation. An object
 * per ack, and a queue name made per delivery, cost the consumer of `npm run bench`'s (f2) about
 * 0.15 µs of its 2.3 µs per message. The strings are the delivery's own (its id and destination)
 * and the subscription's queue name.
 *
 * A message reaches one client under more than one target only when it both listens and consumes,
 * or under a wildcard and an id: such an id keeps a list of slots in the map.
 */

/** How many acked deliveries the client remembers to recognise a duplicate after a failover. */
export const ACKED_WINDOW = 20_000;

/** One acked delivery target of a message. */
export interface AckedDelivery {
  /** 1: consumed, 0: listened. */
  kind: 0 | 1;
  queue: string;
  destination: string;
  messageId: string;
}

/** A free slot's message id: a real one is never empty. */
const FREE = "";

export class RecentAcks {
  // Made at the first ack (about 500 KB): a client of one broker remembers none.
  #kinds = new Uint8Array(0);
  #queues: string[] = [];
  #destinations: string[] = [];
  #ids: string[] = [];
  /** The slot the next ack takes (the oldest one, once the ring is full). */
  #next = 0;
  /** Slots by message id, while watching. */
  #byId: Map<string, number | number[]> | null = null;
  /** Acks since the last change of link, while watching. */
  #sinceWatch = 0;

  /** The delivering link changed: acked deliveries are looked up by id from now on. */
  watch(): void {
    this.#sinceWatch = 0;
    if (this.#byId !== null) return;
    const byId = (this.#byId = new Map());
    for (let i = 0; i < this.#ids.length; i++) {
      const slot = (this.#next + i) % ACKED_WINDOW;
      if (this.#ids[slot] !== FREE) this.#index(byId, slot);
    }
  }

  /** True when this target of the message was acked recently (always false when not watching). */
  has(kind: 0 | 1, queue: string, destination: string, messageId: string): boolean {
    const held = this.#byId?.get(messageId);
    if (held === undefined) return false;
    if (typeof held === "number") return this.#isTarget(held, kind, queue, destination);
    return held.some((slot) => this.#isTarget(slot, kind, queue, destination));
  }

  add(kind: 0 | 1, queue: string, destination: string, messageId: string): void {
    if (this.#ids.length === 0) this.#allocate();
    const slot = this.#next;
    let byId = this.#byId;
    if (byId !== null) {
      if (++this.#sinceWatch >= ACKED_WINDOW) {
        byId = this.#byId = null; // every ack remembered was made on the link that delivers now
      } else if (this.#ids[slot] !== FREE) {
        this.#unindex(byId, slot); // the oldest ack leaves the ring
      }
    }
    this.#kinds[slot] = kind;
    this.#queues[slot] = queue;
    this.#destinations[slot] = destination;
    this.#ids[slot] = messageId;
    this.#next = (slot + 1) % ACKED_WINDOW;
    if (byId !== null) this.#index(byId, slot);
  }

  /** Every remembered ack, oldest first. */
  *all(): IterableIterator<AckedDelivery> {
    for (let i = 0; i < this.#ids.length; i++) {
      const slot = (this.#next + i) % ACKED_WINDOW;
      const messageId = this.#ids[slot]!;
      if (messageId === FREE) continue;
      yield { kind: this.#kinds[slot] as 0 | 1, queue: this.#queues[slot]!, destination: this.#destinations[slot]!, messageId };
    }
  }

  #allocate(): void {
    this.#kinds = new Uint8Array(ACKED_WINDOW);
    this.#queues = new Array<string>(ACKED_WINDOW).fill(FREE);
    this.#destinations = new Array<string>(ACKED_WINDOW).fill(FREE);
    this.#ids = new Array<string>(ACKED_WINDOW).fill(FREE);
  }

  #isTarget(slot: number, kind: 0 | 1, queue: string, destination: string): boolean {
    return this.#kinds[slot] === kind && this.#destinations[slot] === destination && this.#queues[slot] === queue;
  }

  /** Indexes `slot` by its message id; an older slot of the same target gives way to it (it leaves the ring first). */
  #index(byId: Map<string, number | number[]>, slot: number): void {
    const messageId = this.#ids[slot]!;
    const kind = this.#kinds[slot] as 0 | 1;
    const queue = this.#queues[slot]!;
    const destination = this.#destinations[slot]!;
    const held = byId.get(messageId);
    if (held === undefined) return void byId.set(messageId, slot);
    if (typeof held === "number") {
      byId.set(messageId, this.#isTarget(held, kind, queue, destination) ? slot : [held, slot]);
      return;
    }
    const same = held.findIndex((each) => this.#isTarget(each, kind, queue, destination));
    if (same >= 0) held[same] = slot;
    else held.push(slot);
  }

  #unindex(byId: Map<string, number | number[]>, slot: number): void {
    const messageId = this.#ids[slot]!;
    const held = byId.get(messageId);
    if (held === undefined) return;
    if (typeof held === "number") {
      if (held === slot) byId.delete(messageId);
      return;
    }
    const left = held.filter((each) => each !== slot);
    if (left.length === 0) byId.delete(messageId);
    else byId.set(messageId, left.length === 1 ? left[0]! : left);
  }
}
