/**
 * Queue subscriptions changing at runtime: unsubscribe() hands in-flight copies on or parks
 * them for the group, and addIds() / removeIds() change what a handler receives.
 */
import { describe, expect, it } from "bun:test";
import { setup } from "./_queue_harness.ts";

describe("Queue", () => {
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
});
