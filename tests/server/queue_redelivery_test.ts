/**
 * Queue redelivery: nack with and without a delay, ack timeouts after requeueInterval, and
 * dead copies past requeueLimit.
 */
import { describe, expect, it } from "bun:test";
import { Message } from "../../src/server/queue/message.ts";
import { setup } from "./_queue_harness.ts";

describe("Queue", () => {
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

  // what the broker is told (the store, and the slaves: onTakenBack)

  it("queue tells onTakenBack of every copy taken back and requeued (nack, with or without a delay, ack timeout, handler gone) with its count, and not of a dead one", () => {
    const t = setup({ requeueInterval: 10, requeueLimit: 5 });
    const a = t.consumer("A", ["X"], 10);
    t.sendMany("X", 4);
    t.nackOldest(a); // m0, at once
    t.nackOldest(a, 30); // m1, due in 30 s
    const delayedAt = t.now + 30_000;
    expect(t.takenBack).toEqual([["m0", 1, 0], ["m1", 1, delayedAt]]);
    t.advance(10_000); // m2, m3 and the redelivered m0 pass their ack deadline, and are delivered again
    expect(t.takenBack.slice(2).sort()).toEqual([["m0", 2, 0], ["m2", 1, 0], ["m3", 1, 0]]);
    t.queue.unsubscribe(a); // its handler leaves with them in flight
    expect(t.takenBack.slice(5).map(([id, deliveries]) => [id, deliveries]).sort()).toEqual([["m0", 3], ["m2", 2], ["m3", 2]]);

    const dying = setup({ requeueLimit: 1 });
    const b = dying.consumer("B", ["X"], 1);
    dying.send("X");
    dying.nackOldest(b);
    expect(dying.dead.map((d) => d.reason)).toEqual(["requeueLimit"]);
    expect(dying.takenBack).toEqual([]);
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

  it("a message that moved in with a delay (notBefore) waits it out, then is delivered; the others go at once", () => {
    const t = setup();
    const later = new Message("moved-1", "orders/v1", "X", new Uint8Array([1]), t.now, 1_000);
    later.notBefore = t.now + 3_000;
    t.queue.publish(later); // waits for a recipient, as a moved queue's messages do until the switch
    const a = t.consumer("A", ["X"], 10);
    t.send("X");
    expect(t.idsOf(a)).toEqual(["m0"]);
    expect(t.queue.depth()).toMatchObject({ delayed: 1, waiting: 0 });
    t.advance(2_999);
    expect(t.idsOf(a)).toEqual(["m0"]);
    t.advance(1);
    expect(t.idsOf(a)).toEqual(["m0", "moved-1"]);
    // Nacked again without a delay, its own delay long over: redelivered at once like any other.
    t.queue.nack(t.inflight(a).find((copy) => copy.message.id === "moved-1")!, 0);
    expect(t.idsOf(a)).toEqual(["m0", "moved-1", "moved-1"]);
    expect(t.queue.depth()).toMatchObject({ delayed: 0 });
  });
});
