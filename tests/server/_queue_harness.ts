/**
 * The harness of the Queue unit tests (tests/server/queue_*_test.ts): a Queue on an injected
 * clock, fake sinks that record every delivery, and helpers that subscribe handlers, publish
 * messages (ids m0, m1, …), ack or nack the oldest delivery and move time forward. No sockets.
 */
import { type Copy, type DeliverySink, Handler, Message } from "../../src/server/queue/message.ts";
import { type DeadReason, Queue, type QueueSettings } from "../../src/server/queue/queue.ts";

export interface Delivery {
  copy: Copy;
  handler: Handler;
  /** Message id, copied at delivery time. */
  id: string;
  /** `copy.destination` at delivery time. */
  destination: string;
  /** `copy.deliveries` at delivery time (1 = first delivery). */
  deliveries: number;
  tag: number;
}

/** A fake connection: records deliveries; `open` is what `writable()` answers. */
export class FakeSink implements DeliverySink {
  open = true;
  readonly got: Delivery[] = [];
  constructor(private readonly log: Delivery[]) {}
  writable(): boolean {
    return this.open;
  }
  deliver(copy: Copy, handler: Handler): void {
    const delivery = {
      copy,
      handler,
      id: copy.message.id,
      destination: copy.destination,
      deliveries: copy.deliveries,
      tag: copy.tag,
    };
    this.got.push(delivery);
    this.log.push(delivery);
  }
}

const DEFAULTS: QueueSettings = {
  listenerPrefetch: 1000,
  prefetch: 1,
  ttl: null,
  maxItemsInQueue: 1000,
  maxMessagesPerQueue: 1_000_000,
  memoryBudgetBytes: 32 * 1024 * 1024,
  requeueLimit: 5,
  requeueInterval: 100,
  deadLetter: null,
  durability: "memory",
};

const START = 1_700_000_000_000;

export function setup(settings: Partial<QueueSettings> = {}) {
  let now = START;
  const log: Delivery[] = [];
  const dead: { id: string; destination: string; reason: DeadReason }[] = [];
  const settled: string[] = [];
  /** Copies taken back from their handler (the onTakenBack hook): id, delivery count, due time (0: at once). */
  const takenBack: [id: string, deliveries: number, at: number][] = [];
  const queue = new Queue("orders/v1", { ...DEFAULTS, ...settings }, {
    now: () => now,
    onTakenBack: (copy, at) => takenBack.push([copy.message.id, copy.deliveries, at]),
    onDead: (copy, reason) => dead.push({ id: copy.message.id, destination: copy.destination, reason }),
    onSettled: (message) => settled.push(message.id),
  });
  let messageSeq = 0;
  let handlerSeq = 0;
  const names = new Map<Handler, string>();

  function handler(
    name: string,
    kind: "consume" | "listen",
    groupKey: string,
    ids: string[],
    prefetch: number,
    sink: FakeSink,
  ): Handler {
    const h = new Handler(handlerSeq++, handlerSeq, kind, groupKey, new Set(ids), prefetch, sink);
    names.set(h, name);
    queue.subscribe(h);
    return h;
  }

  const t = {
    queue,
    log,
    dead,
    settled,
    takenBack,
    get now() {
      return now;
    },
    sink: () => new FakeSink(log),
    /** Publishes a message to `destination` (`*` = broadcast); ids are m0, m1, … */
    send(destination: string): Message {
      const seq = messageSeq++;
      const message = new Message(`m${seq}`, "orders/v1", destination, new Uint8Array([seq & 255]), now, seq);
      queue.publish(message);
      return message;
    },
    sendMany(destination: string, count: number): Message[] {
      return Array.from({ length: count }, () => t.send(destination));
    },
    consumer(name: string, ids: string[], prefetch = 1, sink = new FakeSink(log)): Handler {
      return handler(name, "consume", "consume", ids, prefetch, sink);
    },
    listener(name: string, clientId: string, ids: string[], prefetch = 1000, sink = new FakeSink(log)): Handler {
      return handler(name, "listen", `listen:${clientId}`, ids, prefetch, sink);
    },
    name: (h: Handler) => names.get(h)!,
    sinkOf: (h: Handler) => h.sink as FakeSink,
    /** Deliveries so far as `handler:messageId`. */
    trace: (from = 0) => log.slice(from).map((d) => `${names.get(d.handler)}:${d.id}`),
    /** Message ids delivered to one handler. */
    idsOf: (h: Handler) => (h.sink as FakeSink).got.filter((d) => d.handler === h).map((d) => d.id),
    /** The copies this handler holds unacknowledged, oldest delivery first. */
    inflight: (h: Handler) => [...h.inflight.values()],
    /** Acks the oldest unacknowledged delivery of a handler and returns its message id. */
    ackOldest(h: Handler): string {
      const copy = [...h.inflight.values()][0];
      if (!copy) throw new Error(`${names.get(h)} holds nothing`);
      const id = copy.message.id;
      queue.ack(copy);
      return id;
    },
    nackOldest(h: Handler, delaySeconds = 0): string {
      const copy = [...h.inflight.values()][0];
      if (!copy) throw new Error(`${names.get(h)} holds nothing`);
      const id = copy.message.id;
      queue.nack(copy, delaySeconds);
      return id;
    },
    /** Moves the clock forward and runs the queue's timers. */
    advance(ms: number): void {
      now += ms;
      queue.tick(now);
    },
  };
  return t;
}

export type Harness = ReturnType<typeof setup>;

/** How many deliveries each message id got, counting only first deliveries. */
export function firstDeliveriesPerMessage(t: Harness): Map<string, number> {
  const counts = new Map<string, number>();
  for (const d of t.log) if (d.deliveries === 1) counts.set(d.id, (counts.get(d.id) ?? 0) + 1);
  return counts;
}
