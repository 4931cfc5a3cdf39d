/**
 * Queue routing: competing consumers round-robin, listeners fan out per clientId, a send to
 * `*` reaches every registered id, and each queue is FIFO.
 */
import { describe, expect, it } from "bun:test";
import type { Handler } from "../../src/server/queue/message.ts";
import { firstDeliveriesPerMessage, setup } from "./_queue_harness.ts";

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
});
