/**
 * Queue acknowledgements: each copy of a message is acked on its own, prefetch and writable
 * sinks bound what is in flight, and depth() / live count every state.
 */
import { describe, expect, it } from "bun:test";
import { CopyState } from "../../src/server/queue/message.ts";
import { setup } from "./_queue_harness.ts";

describe("Queue", () => {
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
