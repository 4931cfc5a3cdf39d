import { describe, expect, it } from "bun:test";
import { type Copy, CopyState, type DeliverySink, Handler, Message } from "../../src/server/message.ts";
import { type DeadReason, Queue, type QueueSettings } from "../../src/server/queue.ts";

// ── harness ──────────────────────────────────────────────────────────────────────────────────

interface Delivery {
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
class FakeSink implements DeliverySink {
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
  requeueLimit: 5,
  requeueInterval: 100,
  deadLetter: null,
  durability: "memory",
};

const START = 1_700_000_000_000;

function setup(settings: Partial<QueueSettings> = {}) {
  let now = START;
  const log: Delivery[] = [];
  const dead: { id: string; destination: string; reason: DeadReason }[] = [];
  const settled: string[] = [];
  const queue = new Queue("orders/v1", { ...DEFAULTS, ...settings }, {
    now: () => now,
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

type Harness = ReturnType<typeof setup>;

/** How many deliveries each message id got, counting only first deliveries. */
function firstDeliveriesPerMessage(t: Harness): Map<string, number> {
  const counts = new Map<string, number>();
  for (const d of t.log) if (d.deliveries === 1) counts.set(d.id, (counts.get(d.id) ?? 0) + 1);
  return counts;
}

// ── tests ────────────────────────────────────────────────────────────────────────────────────

describe("Queue", () => {
  // consume: competing consumers, round-robin

  it("queue.publish() gives each message to exactly one consumer, round-robin from the earliest registrant", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 10);
    const b = t.consumer("B", ["X"], 10);
    const c = t.consumer("C", ["X"], 10);
    t.sendMany("X", 7);
    expect(t.trace()).toEqual(["A:m0", "B:m1", "C:m2", "A:m3", "B:m4", "C:m5", "A:m6"]);
    expect([...firstDeliveriesPerMessage(t).values()].every((n) => n === 1)).toBe(true);
    expect(t.log.length).toBe(7);
    expect(t.idsOf(a)).toEqual(["m0", "m3", "m6"]);
    expect(t.idsOf(b)).toEqual(["m1", "m4"]);
    expect(t.idsOf(c)).toEqual(["m2", "m5"]);
    expect(t.queue.counters.delivered).toBe(7);
    expect(t.queue.counters.received).toBe(7);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 7, delayed: 0, waiting: 0 });
  });

  it("queue.publish() round-robins consumers on the id and on `*` merged by registration order", () => {
    const t = setup();
    t.consumer("A", ["X"], 10);
    t.consumer("B", ["*"], 10);
    t.consumer("C", ["X"], 10);
    t.consumer("D", ["Y"], 10); // not a candidate for X
    t.sendMany("X", 6);
    expect(t.trace()).toEqual(["A:m0", "B:m1", "C:m2", "A:m3", "B:m4", "C:m5"]);
  });

  it("queue.publish() round-robins consumers on `*` also when every message has a different id", () => {
    const t = setup();
    const a = t.consumer("A", ["*"], 10);
    const b = t.consumer("B", ["*"], 10);
    for (const id of ["u1", "u2", "u3", "u4", "u5", "u6"]) t.send(id);
    expect(t.idsOf(a)).toEqual(["m0", "m2", "m4"]);
    expect(t.idsOf(b)).toEqual(["m1", "m3", "m5"]);
  });

  it("queue.publish() skips a consumer at its prefetch limit and keeps the rotation for the others", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 1);
    const b = t.consumer("B", ["X"], 10);
    const c = t.consumer("C", ["X"], 10);
    t.sendMany("X", 5);
    expect(t.idsOf(a)).toEqual(["m0"]);
    expect(t.trace()).toEqual(["A:m0", "B:m1", "C:m2", "B:m3", "C:m4"]);
    expect(b.inflight.size + c.inflight.size).toBe(4);
  });

  // listen: fan-out per clientId

  it("queue.publish() gives one copy to each listening clientId; handlers sharing a clientId share it round-robin", () => {
    const t = setup();
    const l1 = t.listener("c1", "client-1", ["X"]);
    const l2a = t.listener("c2a", "client-2", ["X"]);
    const l2b = t.listener("c2b", "client-2", ["*"]);
    const cons = t.consumer("K", ["X"], 10);
    t.sendMany("X", 4);
    expect(t.idsOf(l1)).toEqual(["m0", "m1", "m2", "m3"]);
    expect(t.idsOf(l2a)).toEqual(["m0", "m2"]);
    expect(t.idsOf(l2b)).toEqual(["m1", "m3"]);
    expect(t.idsOf(cons)).toEqual(["m0", "m1", "m2", "m3"]);
    // 3 copies per message: client-1, client-2, consumers
    expect(t.log.length).toBe(12);
    for (const [, n] of firstDeliveriesPerMessage(t)) expect(n).toBe(3);
  });

  it("queue.publish() gives one copy, not two, to a client listening on X and on `*`", () => {
    const t = setup();
    const onX = t.listener("x", "client-1", ["X"]);
    const onAll = t.listener("all", "client-1", ["*"]);
    const both = t.listener("both", "client-2", ["X", "*"]);
    t.sendMany("X", 4);
    expect([...t.idsOf(onX), ...t.idsOf(onAll)].sort()).toEqual(["m0", "m1", "m2", "m3"]);
    expect(t.idsOf(onX)).toEqual(["m0", "m2"]);
    expect(t.idsOf(onAll)).toEqual(["m1", "m3"]);
    expect(t.idsOf(both)).toEqual(["m0", "m1", "m2", "m3"]);
    t.send("Y"); // only `*` of client-1 and client-2 cover Y
    expect(t.idsOf(onAll)).toEqual(["m1", "m3", "m4"]);
    expect(t.idsOf(both)).toEqual(["m0", "m1", "m2", "m3", "m4"]);
  });

  // independent ack state

  it("queue.ack() of a listener copy does not settle the consumer copy of the same message", () => {
    const t = setup();
    const l = t.listener("L", "client-1", ["X"]);
    const k = t.consumer("K", ["X"], 1);
    const message = t.send("X");
    expect(t.idsOf(l)).toEqual(["m0"]);
    expect(t.idsOf(k)).toEqual(["m0"]);
    const [listenerCopy] = t.inflight(l);
    const [consumerCopy] = t.inflight(k);
    expect(listenerCopy).not.toBe(consumerCopy);
    expect(listenerCopy!.tag).not.toBe(consumerCopy!.tag);

    t.queue.ack(listenerCopy!);
    expect(listenerCopy!.state).toBe(CopyState.SETTLED);
    expect(consumerCopy!.state).toBe(CopyState.INFLIGHT);
    expect(k.inflight.size).toBe(1);
    expect(t.settled).toEqual([]);
    expect(t.queue.live).toBe(1);
    expect(message.refs).toBe(1);
    expect(t.queue.depth().inflight).toBe(1);

    t.queue.ack(consumerCopy!);
    expect(t.settled).toEqual(["m0"]);
    expect(t.queue.live).toBe(0);
    expect(t.queue.counters.acked).toBe(2);
  });

  it("queue.nack() of a consumer copy redelivers only to consumers, never to the listener again", () => {
    const t = setup();
    const l = t.listener("L", "client-1", ["X"]);
    const k1 = t.consumer("K1", ["X"], 1);
    const k2 = t.consumer("K2", ["X"], 1);
    t.send("X");
    expect(t.trace()).toEqual(["L:m0", "K1:m0"]);
    t.nackOldest(k1);
    expect(t.trace()).toEqual(["L:m0", "K1:m0", "K2:m0"]);
    expect(t.log[2]!.deliveries).toBe(2);
    expect(t.idsOf(l)).toEqual(["m0"]);
    expect(l.inflight.size).toBe(1); // the listener copy is untouched
    // and acking the listener copy does not settle the redelivered consumer copy
    t.ackOldest(l);
    expect(t.settled).toEqual([]);
    t.ackOldest(k2);
    expect(t.settled).toEqual(["m0"]);
  });

  it("queue.nack() of a listener copy redelivers to that clientId only", () => {
    const t = setup();
    const l1 = t.listener("L1", "client-1", ["X"]);
    const l2 = t.listener("L2", "client-2", ["X"]);
    const k = t.consumer("K", ["X"]);
    t.send("X");
    t.nackOldest(l1);
    expect(t.idsOf(l1)).toEqual(["m0", "m0"]);
    expect(t.idsOf(l2)).toEqual(["m0"]);
    expect(t.idsOf(k)).toEqual(["m0"]);
  });

  // broadcast

  it("queue.publish() to `*` delivers to every id with a registration, as if sent to each", () => {
    const t = setup();
    const kx = t.consumer("KX", ["X"], 10);
    const ky = t.consumer("KY", ["Y"], 10);
    const lz = t.listener("LZ", "client-1", ["Z"]);
    const lall = t.listener("LALL", "client-2", ["*"]);
    t.send("*");
    const got = (h: Handler) => t.sinkOf(h).got.filter((d) => d.handler === h).map((d) => `${d.id}@${d.destination}`);
    expect(got(kx)).toEqual(["m0@X"]);
    expect(got(ky)).toEqual(["m0@Y"]);
    expect(got(lz)).toEqual(["m0@Z"]);
    // client-2 listens on every id: it gets one copy per destination id, as three sends would give
    expect(got(lall).sort()).toEqual(["m0@X", "m0@Y", "m0@Z"]);
    expect(t.log.length).toBe(6);
    // the message settles only when every copy is acked
    for (const h of [kx, ky, lz]) t.ackOldest(h);
    t.ackOldest(lall);
    t.ackOldest(lall);
    expect(t.settled).toEqual([]);
    t.ackOldest(lall);
    expect(t.settled).toEqual(["m0"]);
    expect(t.queue.live).toBe(0);
  });

  it("queue.publish() to `*` with only `*` registrations delivers once, with destination `*`", () => {
    const t = setup();
    const a = t.consumer("A", ["*"], 10);
    const b = t.consumer("B", ["*"], 10);
    const l = t.listener("L", "client-1", ["*"]);
    t.send("*");
    t.send("*");
    expect(t.trace()).toEqual(["A:m0", "L:m0", "B:m1", "L:m1"]);
    expect(t.log.every((d) => d.destination === "*")).toBe(true);
    expect(t.idsOf(a)).toEqual(["m0"]);
    expect(t.idsOf(b)).toEqual(["m1"]);
    expect(t.idsOf(l)).toEqual(["m0", "m1"]);
  });

  it("queue.publish() to `*` gives a consumer on `*` one copy per registered id (the ids of other handlers)", () => {
    const t = setup();
    const all = t.consumer("ALL", ["*"], 10);
    t.listener("LX", "client-1", ["X"]);
    t.listener("LY", "client-2", ["Y"]);
    t.send("*");
    expect(t.sinkOf(all).got.map((d) => d.destination).sort()).toEqual(["X", "Y"]);
  });

  // prefetch, ack, backpressure

  it("queue.ack() frees a prefetch slot and the next ready copy is delivered, in order", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 2);
    t.sendMany("X", 5);
    expect(t.idsOf(a)).toEqual(["m0", "m1"]);
    expect(t.queue.depth()).toEqual({ ready: 3, inflight: 2, delayed: 0, waiting: 0 });
    expect(t.ackOldest(a)).toBe("m0");
    expect(t.idsOf(a)).toEqual(["m0", "m1", "m2"]);
    expect(t.queue.depth()).toEqual({ ready: 2, inflight: 2, delayed: 0, waiting: 0 });
    t.ackOldest(a);
    t.ackOldest(a);
    t.ackOldest(a);
    expect(t.idsOf(a)).toEqual(["m0", "m1", "m2", "m3", "m4"]);
    t.ackOldest(a);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 0, delayed: 0, waiting: 0 });
    expect(t.settled).toEqual(["m0", "m1", "m2", "m3", "m4"]);
    expect(t.queue.live).toBe(0);
  });

  it("queue prefetch is per handler: a consumer at its limit never stalls another consumer", () => {
    const t = setup();
    const slow = t.consumer("slow", ["X"], 1);
    const fast = t.consumer("fast", ["*"], 1);
    t.sendMany("X", 6);
    expect(t.idsOf(slow)).toEqual(["m0"]);
    expect(t.idsOf(fast)).toEqual(["m1"]);
    // the fast one keeps acking; the slow one never does
    for (let i = 0; i < 4; i++) t.ackOldest(fast);
    expect(t.idsOf(fast)).toEqual(["m1", "m2", "m3", "m4", "m5"]);
    expect(t.idsOf(slow)).toEqual(["m0"]);
    expect(slow.inflight.size).toBe(1);
  });

  it("queue delivers nothing to a handler whose sink is not writable until pump(), and others keep receiving", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 10);
    const b = t.consumer("B", ["X"], 10);
    t.sinkOf(a).open = false;
    t.sendMany("X", 3);
    expect(t.idsOf(a)).toEqual([]);
    expect(t.idsOf(b)).toEqual(["m0", "m1", "m2"]);

    t.sinkOf(b).open = false;
    t.sendMany("X", 2);
    expect(t.log.length).toBe(3);
    expect(t.queue.depth().ready).toBe(2);
    t.sinkOf(a).open = true;
    expect(t.idsOf(a)).toEqual([]); // nothing happens until the broker pumps
    t.queue.pump(a);
    expect(t.idsOf(a)).toEqual(["m3", "m4"]);
    expect(t.queue.depth().ready).toBe(0);
  });

  it("queue.pump() stops when the sink turns unwritable in the middle of a backlog", () => {
    const t = setup();
    const sink = t.sink();
    sink.open = false;
    const a = t.consumer("A", ["X"], 10, sink);
    t.sendMany("X", 4);
    const original = sink.deliver.bind(sink);
    sink.deliver = (copy, handler) => {
      original(copy, handler);
      if (sink.got.length === 2) sink.open = false;
    };
    sink.open = true;
    t.queue.pump(a);
    expect(t.idsOf(a)).toEqual(["m0", "m1"]);
    expect(t.queue.depth()).toEqual({ ready: 2, inflight: 2, delayed: 0, waiting: 0 });
  });

  // nack

  it("queue.nack() with no delay redelivers the copy at the back of the queue", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 1);
    t.sendMany("X", 3);
    expect(t.nackOldest(a)).toBe("m0");
    expect(t.queue.counters.nacked).toBe(1);
    expect(t.idsOf(a)).toEqual(["m0", "m1"]);
    t.ackOldest(a);
    t.ackOldest(a);
    expect(t.idsOf(a)).toEqual(["m0", "m1", "m2", "m0"]);
    const last = t.log.at(-1)!;
    expect(last.deliveries - 1).toBe(1); // nbRequeues
    expect(last.tag).not.toBe(t.log[0]!.tag);
    t.ackOldest(a);
    expect(t.settled).toEqual(["m1", "m2", "m0"]);
  });

  it("queue.nack() with a delay does not redeliver before the delay and redelivers at tick(now + delay)", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 1);
    t.send("X");
    t.nackOldest(a, 5);
    expect(a.inflight.size).toBe(0);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 0, delayed: 1, waiting: 0 });
    expect(t.queue.hasTimers).toBe(true);
    t.advance(4_999);
    expect(t.idsOf(a)).toEqual(["m0"]);
    t.advance(1);
    expect(t.idsOf(a)).toEqual(["m0", "m0"]);
    expect(t.log.at(-1)!.deliveries - 1).toBe(1);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 1, delayed: 0, waiting: 0 });
  });

  it("queue.nack() with a delay lets other messages through meanwhile and counts nbRequeues across nacks", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 1);
    t.sendMany("X", 2);
    t.nackOldest(a, 2);
    expect(t.idsOf(a)).toEqual(["m0", "m1"]); // m1 is not held back by the delayed m0
    t.ackOldest(a);
    t.advance(2_000);
    expect(t.log.at(-1)!.id).toBe("m0");
    expect(t.log.at(-1)!.deliveries - 1).toBe(1);
    t.nackOldest(a, 0);
    expect(t.log.at(-1)!.id).toBe("m0");
    expect(t.log.at(-1)!.deliveries - 1).toBe(2);
  });

  it("queue.tick() redelivers several delayed copies in due order, whatever order they were nacked in", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 3);
    t.sendMany("X", 3);
    const [c0, c1, c2] = t.inflight(a);
    t.queue.nack(c0!, 30);
    t.queue.nack(c1!, 10);
    t.queue.nack(c2!, 20);
    expect(t.queue.depth().delayed).toBe(3);
    t.advance(10_000);
    expect(t.trace(3)).toEqual(["A:m1"]);
    t.advance(25_000);
    expect(t.trace(3)).toEqual(["A:m1", "A:m2", "A:m0"]);
    expect(t.queue.depth().delayed).toBe(0);
  });

  // ack timeout

  it("queue.tick() redelivers a copy unacknowledged after requeueInterval and counts a timeout", () => {
    const t = setup({ requeueInterval: 10 });
    const a = t.consumer("A", ["X"], 1);
    t.consumer("B", ["X"], 1); // the redelivery goes round-robin to B
    t.send("X");
    const [first] = t.inflight(a);
    t.advance(9_999);
    expect(t.log.length).toBe(1);
    expect(t.queue.counters.timeout).toBe(0);
    t.advance(1);
    expect(t.queue.counters.timeout).toBe(1);
    expect(a.inflight.size).toBe(0); // the late handler no longer holds it
    expect(t.trace()).toEqual(["A:m0", "B:m0"]);
    expect(t.log[1]!.deliveries).toBe(2);
    expect(first!.tag).not.toBe(t.log[0]!.tag); // the old tag is dead
    expect(t.queue.depth().inflight).toBe(1);
    expect(t.queue.counters.nacked).toBe(0);
  });

  it("queue.tick() times out only the deliveries that are due", () => {
    const t = setup({ requeueInterval: 10 });
    const a = t.consumer("A", ["X"], 5);
    t.send("X");
    t.advance(4_000);
    t.send("X");
    t.advance(6_000); // m0 due, m1 not
    expect(t.queue.counters.timeout).toBe(1);
    expect(t.trace()).toEqual(["A:m0", "A:m1", "A:m0"]);
    t.advance(3_999);
    expect(t.queue.counters.timeout).toBe(1);
    t.advance(1);
    expect(t.queue.counters.timeout).toBe(2);
    expect(t.trace()).toEqual(["A:m0", "A:m1", "A:m0", "A:m1"]);
    expect(t.queue.depth().inflight).toBe(2);
    expect(a.inflight.size).toBe(2);
  });

  it("queue.ack() in time cancels the ack timeout", () => {
    const t = setup({ requeueInterval: 10 });
    const a = t.consumer("A", ["X"], 1);
    t.send("X");
    t.ackOldest(a);
    t.advance(60_000);
    expect(t.queue.counters.timeout).toBe(0);
    expect(t.log.length).toBe(1);
    expect(t.queue.hasTimers).toBe(false);
  });

  // requeueLimit

  it("queue.nack() past requeueLimit total deliveries makes the copy dead, counted, reported and settled", () => {
    const t = setup({ requeueLimit: 3 });
    const a = t.consumer("A", ["X"], 1);
    t.send("X");
    t.nackOldest(a);
    t.nackOldest(a);
    expect(t.idsOf(a)).toEqual(["m0", "m0", "m0"]);
    expect(t.dead).toEqual([]);
    expect(t.queue.live).toBe(1);
    t.nackOldest(a);
    expect(t.idsOf(a)).toEqual(["m0", "m0", "m0"]); // 3 deliveries in all
    expect(t.queue.counters.dead).toBe(1);
    expect(t.dead).toEqual([{ id: "m0", destination: "X", reason: "requeueLimit" }]);
    expect(t.settled).toEqual(["m0"]);
    expect(t.queue.live).toBe(0);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 0, delayed: 0, waiting: 0 });
    expect(t.queue.counters.dropped).toBe(0);
    expect(t.queue.counters.expired).toBe(0);
  });

  it("queue ack timeouts count toward requeueLimit; the message settles only when its other copies do", () => {
    const t = setup({ requeueLimit: 2, requeueInterval: 1 });
    const l = t.listener("L", "client-1", ["X"]);
    const k = t.consumer("K", ["X"], 1);
    t.send("X");
    t.ackOldest(l);
    t.advance(1_000);
    expect(t.idsOf(k)).toEqual(["m0", "m0"]);
    expect(t.queue.counters.timeout).toBe(1);
    expect(t.dead).toEqual([]);
    t.advance(1_000);
    expect(t.queue.counters.timeout).toBe(2);
    expect(t.queue.counters.dead).toBe(1);
    expect(t.dead).toEqual([{ id: "m0", destination: "X", reason: "requeueLimit" }]);
    expect(t.settled).toEqual(["m0"]);
    expect(t.idsOf(k)).toEqual(["m0", "m0"]);
    expect(t.queue.live).toBe(0);
  });

  it("queue calls onSettled once, after the last live copy (dead or acked) of a message", () => {
    const t = setup({ requeueLimit: 1 });
    const l = t.listener("L", "client-1", ["X"]);
    const k = t.consumer("K", ["X"], 1);
    t.send("X");
    t.nackOldest(k); // dead at once: limit 1
    expect(t.queue.counters.dead).toBe(1);
    expect(t.settled).toEqual([]);
    expect(t.queue.live).toBe(1);
    t.ackOldest(l);
    expect(t.settled).toEqual(["m0"]);
    expect(t.queue.live).toBe(0);
  });

  // waiting messages

  it("queue keeps a message nobody can receive waiting, and a later subscriber on its id receives the waiting ones in order", () => {
    const t = setup();
    t.sendMany("X", 3);
    t.send("Y");
    expect(t.log).toEqual([]);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 0, delayed: 0, waiting: 4 });
    expect(t.queue.waitingById()).toEqual(new Map([["X", 3], ["Y", 1]]));
    expect(t.queue.live).toBe(4);

    const other = t.consumer("other", ["Z"], 10); // another id does not take them
    const l = t.listener("LZ", "client-1", ["Z"]);
    expect(t.idsOf(other)).toEqual([]);
    expect(t.idsOf(l)).toEqual([]);
    expect(t.queue.depth().waiting).toBe(4);

    const a = t.consumer("A", ["X"], 1);
    expect(t.idsOf(a)).toEqual(["m0"]);
    expect(t.queue.waitingById()).toEqual(new Map([["Y", 1]]));
    expect(t.queue.depth()).toEqual({ ready: 2, inflight: 1, delayed: 0, waiting: 1 });
    t.ackOldest(a);
    t.ackOldest(a);
    expect(t.idsOf(a)).toEqual(["m0", "m1", "m2"]);
    expect(t.log[0]!.destination).toBe("X");
  });

  it("queue gives a waiting message to the first registrant only: a later listener on its id does not get it too", () => {
    const t = setup();
    t.send("X");
    const l1 = t.listener("L1", "client-1", ["X"]);
    const l2 = t.listener("L2", "client-2", ["X"]);
    expect(t.idsOf(l1)).toEqual(["m0"]);
    expect(t.idsOf(l2)).toEqual([]);
    t.ackOldest(l1);
    expect(t.settled).toEqual(["m0"]);
    expect(t.queue.live).toBe(0);
  });

  it("queue.subscribe() with an unwritable sink takes the waiting messages and delivers them at pump()", () => {
    const t = setup();
    t.sendMany("X", 2);
    const sink = t.sink();
    sink.open = false;
    const a = t.consumer("A", ["X"], 5, sink);
    expect(t.idsOf(a)).toEqual([]);
    expect(t.queue.depth()).toEqual({ ready: 2, inflight: 0, delayed: 0, waiting: 0 });
    sink.open = true;
    t.queue.pump(a);
    expect(t.idsOf(a)).toEqual(["m0", "m1"]);
  });

  it("queue delivers a waiting message to a subscriber on `*`", () => {
    const t = setup();
    t.send("X");
    const a = t.consumer("A", ["*"], 5);
    expect(t.sinkOf(a).got.map((d) => `${d.id}@${d.destination}`)).toEqual(["m0@X"]);
  });

  it("queue delivers messages sent to `*` with nobody registered to the first registrant, whatever its id", () => {
    const t = setup();
    t.send("*");
    t.send("*");
    expect(t.queue.depth().waiting).toBe(2);
    expect(t.queue.waitingById()).toEqual(new Map([["*", 2]]));
    const a = t.consumer("A", ["Y"], 5);
    expect(t.sinkOf(a).got.map((d) => `${d.id}@${d.destination}`)).toEqual(["m0@Y", "m1@Y"]);
    expect(t.queue.depth().waiting).toBe(0);
    const b = t.consumer("B", ["Z"], 5);
    expect(t.idsOf(b)).toEqual([]);
    t.ackOldest(a);
    t.ackOldest(a);
    expect(t.settled).toEqual(["m0", "m1"]);
    expect(t.queue.live).toBe(0);
  });

  it("queue bounds waiting messages by maxItemsInQueue, dropping the oldest first", () => {
    const t = setup({ maxItemsInQueue: 3 });
    t.send("X");
    t.send("Y");
    t.send("X");
    t.send("*");
    t.send("X");
    expect(t.queue.depth().waiting).toBe(3);
    expect(t.queue.counters.dropped).toBe(2);
    expect(t.dead).toEqual([
      { id: "m0", destination: "X", reason: "overflow" },
      { id: "m1", destination: "Y", reason: "overflow" },
    ]);
    expect(t.settled).toEqual(["m0", "m1"]);
    expect(t.queue.live).toBe(3);
    const a = t.consumer("A", ["X"], 10);
    expect(t.idsOf(a)).toEqual(["m2", "m3", "m4"]);
    expect(t.queue.counters.dead).toBe(0);
  });

  it("queue does not count messages held for a busy recipient against maxItemsInQueue", () => {
    const t = setup({ maxItemsInQueue: 2 });
    t.consumer("A", ["X"], 1);
    t.sendMany("X", 5);
    expect(t.queue.counters.dropped).toBe(0);
    expect(t.queue.depth()).toEqual({ ready: 4, inflight: 1, delayed: 0, waiting: 0 });
  });

  it("queue.tick() expires waiting messages older than ttl", () => {
    const t = setup({ ttl: 10 });
    t.send("X");
    t.advance(5_000);
    t.send("X");
    expect(t.queue.hasTimers).toBe(true);
    t.advance(4_999);
    expect(t.queue.counters.expired).toBe(0);
    t.advance(1); // m0 is 10 s old
    expect(t.queue.counters.expired).toBe(1);
    expect(t.dead).toEqual([{ id: "m0", destination: "X", reason: "ttl" }]);
    expect(t.settled).toEqual(["m0"]);
    expect(t.queue.depth().waiting).toBe(1);
    expect(t.queue.live).toBe(1);
    t.advance(5_000);
    expect(t.queue.counters.expired).toBe(2);
    expect(t.queue.depth().waiting).toBe(0);
    expect(t.queue.live).toBe(0);
    const a = t.consumer("A", ["X"]);
    expect(t.idsOf(a)).toEqual([]);
    expect(t.queue.counters.dead).toBe(0);
    expect(t.queue.counters.dropped).toBe(0);
  });

  it("queue ttl does not expire messages already delivered", () => {
    const t = setup({ ttl: 1, requeueInterval: 100 });
    const a = t.consumer("A", ["X"], 1);
    t.sendMany("X", 2);
    t.advance(10_000);
    expect(t.queue.counters.expired).toBe(0);
    t.ackOldest(a);
    expect(t.idsOf(a)).toEqual(["m0", "m1"]);
  });

  it("queue keeps waiting messages in arrival order when a leaving consumer's copies are parked behind younger ones", () => {
    const t = setup();
    const sink = t.sink();
    sink.open = false;
    const a = t.consumer("A", ["X"], 1, sink);
    t.sendMany("X", 2); // m0, m1 ready for A, which cannot take them
    t.send("Y"); // m2 waits: nobody on Y
    t.queue.unsubscribe(a); // m0 and m1 now wait too; they are older than m2
    expect(t.queue.depth().waiting).toBe(3);
    const all = t.consumer("ALL", ["*"], 1);
    t.ackOldest(all);
    t.ackOldest(all);
    expect(t.idsOf(all)).toEqual(["m0", "m1", "m2"]);
  });

  it("queue drops the oldest waiting message on overflow, also when it was parked by a leaving consumer", () => {
    const t = setup({ maxItemsInQueue: 3 });
    const sink = t.sink();
    sink.open = false;
    const a = t.consumer("A", ["X"], 1, sink);
    t.sendMany("X", 2);
    t.send("Y");
    t.queue.unsubscribe(a);
    t.send("Y"); // full: the oldest (m0) goes, not m2
    expect(t.dead).toEqual([{ id: "m0", destination: "X", reason: "overflow" }]);
    expect(t.queue.waitingById()).toEqual(new Map([["X", 1], ["Y", 2]]));
  });

  it("queue expires a waiting message at its ttl, also when it was parked behind a younger one", () => {
    const t = setup({ ttl: 10 });
    const sink = t.sink();
    sink.open = false;
    const a = t.consumer("A", ["X"], 1, sink);
    t.sendMany("X", 2);
    t.advance(5_000);
    t.send("Y");
    t.queue.unsubscribe(a);
    t.advance(5_000); // m0 and m1 are 10 s old, m2 is 5 s old
    expect(t.dead.map((d) => `${d.id}:${d.reason}`)).toEqual(["m0:ttl", "m1:ttl"]);
    expect(t.queue.counters.expired).toBe(2);
    expect(t.queue.waitingById()).toEqual(new Map([["Y", 1]]));
  });

  it("queue settles a message once even when the sink acknowledges synchronously inside deliver()", () => {
    const t = setup();
    const sink = t.sink();
    const original = sink.deliver.bind(sink);
    let queue: Queue | null = null;
    sink.deliver = (copy, handler) => {
      original(copy, handler);
      queue!.ack(copy);
    };
    queue = t.queue;
    const k = t.consumer("K", ["X"], 1, sink);
    const l = t.listener("L", "client-1", ["X"]);
    t.send("X");
    expect(t.settled).toEqual([]); // the listener copy is still in flight
    expect(t.queue.live).toBe(1);
    t.ackOldest(l);
    expect(t.settled).toEqual(["m0"]);
    expect(t.queue.live).toBe(0);
    // and a waiting message handed to a synchronous acker settles once too
    t.send("Y");
    t.queue.addIds(k, ["Y"]);
    expect(t.settled).toEqual(["m0", "m1"]);
    expect(t.queue.live).toBe(0);
    expect(t.idsOf(k)).toEqual(["m0", "m1"]);
  });

  // unsubscribe

  it("queue.unsubscribe() requeues the handler's in-flight copies at once to the remaining handlers", () => {
    const t = setup({ requeueInterval: 100 });
    const a = t.consumer("A", ["X"], 2);
    const b = t.consumer("B", ["X"], 5);
    t.sendMany("X", 4);
    expect(t.idsOf(a)).toEqual(["m0", "m2"]);
    expect(t.idsOf(b)).toEqual(["m1", "m3"]);
    t.queue.unsubscribe(a);
    expect(t.idsOf(b)).toEqual(["m1", "m3", "m0", "m2"]);
    expect(t.queue.counters.timeout).toBe(0);
    expect(a.inflight.size).toBe(0);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 4, delayed: 0, waiting: 0 });
    t.send("X");
    expect(t.idsOf(a)).toEqual(["m0", "m2"]); // nothing more to a gone handler
    expect(t.idsOf(b)).toEqual(["m1", "m3", "m0", "m2", "m4"]);
  });

  it("queue.unsubscribe() of a listener hands its copies to the other handler of the same clientId", () => {
    const t = setup();
    const l1 = t.listener("L1", "client-1", ["X"]);
    const l2 = t.listener("L2", "client-1", ["X"]);
    t.sendMany("X", 2);
    expect(t.idsOf(l1)).toEqual(["m0"]);
    t.queue.unsubscribe(l1);
    expect(t.idsOf(l2)).toEqual(["m1", "m0"]);
  });

  it("queue.unsubscribe() of the last handler of a group parks its copies for the next registrant of that group", () => {
    const t = setup();
    const l = t.listener("L", "client-1", ["X"]);
    const a = t.consumer("A", ["X"], 1);
    t.sendMany("X", 3);
    expect(t.idsOf(a)).toEqual(["m0"]);
    t.ackOldest(l);
    t.ackOldest(l);
    t.ackOldest(l);
    t.queue.unsubscribe(a);
    // m0 was in flight, m1 and m2 ready: all three wait now
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 0, delayed: 0, waiting: 3 });
    expect(t.queue.waitingById()).toEqual(new Map([["X", 3]]));
    expect(t.queue.live).toBe(3);
    // a listener is not of the consumers' group: it does not take them
    const l2 = t.listener("L2", "client-2", ["X"]);
    expect(t.idsOf(l2)).toEqual([]);
    // a consumer on another id does not take them either
    const c = t.consumer("C", ["Y"], 10);
    expect(t.idsOf(c)).toEqual([]);
    // the next consumer on X does
    const b = t.consumer("B", ["X"], 10);
    expect(t.idsOf(b)).toEqual(["m0", "m1", "m2"]); // in arrival order
    expect(t.log.slice(-3).map((d) => d.deliveries)).toEqual([2, 1, 1]); // m0 was delivered before
    expect(t.queue.depth().waiting).toBe(0);
    for (let i = 0; i < 3; i++) t.ackOldest(b);
    expect(t.settled.sort()).toEqual(["m0", "m1", "m2"]);
    expect(t.queue.live).toBe(0);
  });

  it("queue.unsubscribe() of a listening client keeps its copies for that client, not for another client", () => {
    const t = setup();
    const l = t.listener("L", "client-1", ["X"], 1);
    t.sendMany("X", 2);
    t.queue.unsubscribe(l);
    expect(t.queue.depth().waiting).toBe(2);
    const other = t.listener("O", "client-2", ["X"]);
    expect(t.idsOf(other)).toEqual([]);
    const back = t.listener("back", "client-1", ["*"]);
    expect(t.idsOf(back).sort()).toEqual(["m0", "m1"]);
    expect(t.queue.depth().waiting).toBe(0);
  });

  it("queue.unsubscribe() keeps copies routed for `*` consumers when a `*` consumer remains", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 1);
    const b = t.consumer("B", ["*"], 1);
    t.sendMany("X", 3);
    t.queue.unsubscribe(a);
    expect(t.queue.depth().waiting).toBe(0);
    expect(t.idsOf(b)).toEqual(["m1"]);
    t.ackOldest(b);
    t.ackOldest(b);
    expect(t.idsOf(b)).toEqual(["m1", "m2", "m0"]);
  });

  it("queue redelivers a delayed copy to the group that comes back after its handlers all left", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 1);
    t.send("X");
    t.nackOldest(a, 5);
    t.queue.unsubscribe(a);
    t.advance(5_000);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 0, delayed: 0, waiting: 1 });
    const b = t.consumer("B", ["X"], 1);
    expect(t.idsOf(b)).toEqual(["m0"]);
    expect(t.log.at(-1)!.deliveries).toBe(2);
  });

  // addIds / removeIds

  it("queue.addIds() at runtime delivers the messages waiting for the new id", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 10);
    t.send("Y");
    t.send("Y");
    t.send("Z");
    expect(t.idsOf(a)).toEqual([]);
    t.queue.addIds(a, ["Y"]);
    expect(a.ids.has("Y")).toBe(true);
    expect(t.idsOf(a)).toEqual(["m0", "m1"]);
    expect(t.queue.waitingById()).toEqual(new Map([["Z", 1]]));
    t.send("Y");
    expect(t.idsOf(a)).toEqual(["m0", "m1", "m3"]);
  });

  it("queue.removeIds() stops new deliveries for the removed id", () => {
    const t = setup();
    const a = t.consumer("A", ["X", "Y"], 10);
    t.send("X");
    t.queue.removeIds(a, ["X"]);
    expect(a.ids.has("X")).toBe(false);
    t.send("X");
    t.send("Y");
    expect(t.idsOf(a)).toEqual(["m0", "m2"]);
    expect(t.queue.waitingById()).toEqual(new Map([["X", 1]]));
    // the in-flight delivery on the removed id can still be acked
    t.ackOldest(a);
    expect(t.settled).toEqual(["m0"]);
    // adding it back delivers what waited meanwhile
    t.queue.addIds(a, ["X"]);
    expect(t.idsOf(a)).toEqual(["m0", "m2", "m1"]);
  });

  it("queue.removeIds() of a busy consumer's id parks its ready copies until someone takes the id", () => {
    const t = setup();
    const a = t.consumer("A", ["X"], 1);
    t.sendMany("X", 3);
    t.queue.removeIds(a, ["X"]);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 1, delayed: 0, waiting: 2 });
    t.ackOldest(a);
    expect(t.idsOf(a)).toEqual(["m0"]);
    const b = t.consumer("B", ["X"], 5);
    expect(t.idsOf(b)).toEqual(["m1", "m2"]);
  });

  // ordering

  it("queue is FIFO per queue with a backlog: a `*` consumer with prefetch 1 takes the oldest message first, across ids", () => {
    const t = setup();
    const sink = t.sink();
    sink.open = false;
    const all = t.consumer("ALL", ["*"], 1, sink);
    const order = ["X", "Y", "Z", "Y", "X", "Z", "Z", "X"];
    for (const id of order) t.send(id);
    expect(t.queue.depth().ready).toBe(8);
    sink.open = true;
    t.queue.pump(all);
    for (let i = 0; i < order.length - 1; i++) t.ackOldest(all);
    expect(t.idsOf(all)).toEqual(order.map((_, i) => `m${i}`));
    expect(t.log.map((d) => d.destination)).toEqual(order);
  });

  it("queue is FIFO for a consumer on several ids with prefetch 1", () => {
    const t = setup();
    const sink = t.sink();
    sink.open = false;
    const k = t.consumer("K", ["X", "Y"], 1, sink);
    for (const id of ["Y", "X", "X", "Y", "X"]) t.send(id);
    sink.open = true;
    t.queue.pump(k);
    for (let i = 0; i < 4; i++) t.ackOldest(k);
    expect(t.idsOf(k)).toEqual(["m0", "m1", "m2", "m3", "m4"]);
  });

  it("queue puts redeliveries behind the backlog of their id (FIFO except redeliveries at the back)", () => {
    const t = setup({ requeueInterval: 5 });
    const k = t.consumer("K", ["*"], 1);
    t.send("X");
    t.send("Y");
    t.send("X");
    t.advance(5_000); // m0 times out and goes to the back
    expect(t.idsOf(k)).toEqual(["m0", "m1"]);
    t.ackOldest(k);
    t.ackOldest(k);
    expect(t.idsOf(k)).toEqual(["m0", "m1", "m2", "m0"]);
  });

  // depth

  it("queue.depth() reports ready, inflight, delayed and waiting in each state", () => {
    const t = setup();
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 0, delayed: 0, waiting: 0 });
    t.sendMany("W", 2);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 0, delayed: 0, waiting: 2 });
    const a = t.consumer("A", ["X"], 2);
    const l = t.listener("L", "client-1", ["X"], 1);
    t.sendMany("X", 4);
    // consumer: 2 in flight, 2 ready; listener: 1 in flight, 3 ready
    expect(t.queue.depth()).toEqual({ ready: 5, inflight: 3, delayed: 0, waiting: 2 });
    t.nackOldest(a, 10);
    // m2 takes the freed slot
    expect(t.queue.depth()).toEqual({ ready: 4, inflight: 3, delayed: 1, waiting: 2 });
    t.ackOldest(l);
    expect(t.queue.depth()).toEqual({ ready: 3, inflight: 3, delayed: 1, waiting: 2 });
    t.advance(10_000);
    expect(t.queue.depth()).toEqual({ ready: 4, inflight: 3, delayed: 0, waiting: 2 });
    expect(t.queue.live).toBe(6);
  });

  it("queue.live counts messages with at least one live copy", () => {
    const t = setup();
    const l = t.listener("L", "client-1", ["X"]);
    const k = t.consumer("K", ["X"], 5);
    t.sendMany("X", 2);
    expect(t.queue.live).toBe(2);
    t.ackOldest(l);
    expect(t.queue.live).toBe(2);
    t.ackOldest(k);
    expect(t.queue.live).toBe(1);
    expect(t.settled).toEqual(["m0"]);
  });
});
