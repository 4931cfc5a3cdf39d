/**
 * Queue waiting messages: kept for the next registrant when nobody can receive them, bounded
 * by maxItemsInQueue (oldest dropped) and expired at their ttl.
 */
import { describe, expect, it } from "bun:test";
import type { Queue } from "../../src/server/queue/queue.ts";
import { setup } from "./_queue_harness.ts";

describe("Queue", () => {
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
});
