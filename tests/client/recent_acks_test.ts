/**
 * RecentAcks (src/client/recent_acks.ts): the last ACKED_WINDOW acks of a client of several
 * brokers, kept as a ring of fields and looked up by message id only while the delivering link
 * has changed recently.
 */
import { describe, expect, it } from "bun:test";
import { ACKED_WINDOW, RecentAcks } from "../../src/client/recent_acks.ts";

describe("RecentAcks", () => {
  it("finds an ack by its message and target only once watching, and gives every ack back oldest first", () => {
    const empty = new RecentAcks();
    empty.watch(); // nothing acked yet (its rings are not even made): nothing to index
    expect([...empty.all()]).toEqual([]);
    expect(empty.has(1, "orders/v1", "d1", "m1")).toBe(false);
    const acks = new RecentAcks();
    acks.add(1, "orders/v1", "d1", "m1");
    acks.add(0, "orders/v1", "d1", "m2");
    expect(acks.has(1, "orders/v1", "d1", "m1")).toBe(false); // not watching: no lookups at all
    acks.watch();
    expect(acks.has(1, "orders/v1", "d1", "m1")).toBe(true);
    expect(acks.has(0, "orders/v1", "d1", "m1")).toBe(false); // listened, not consumed
    expect(acks.has(1, "orders/v1", "d2", "m1")).toBe(false);
    expect(acks.has(1, "orders/v2", "d1", "m1")).toBe(false);
    expect(acks.has(0, "orders/v1", "d1", "m2")).toBe(true);
    expect([...acks.all()]).toEqual([
      { kind: 1, queue: "orders/v1", destination: "d1", messageId: "m1" },
      { kind: 0, queue: "orders/v1", destination: "d1", messageId: "m2" },
    ]);
  });

  it("keeps every target of one message, and forgets each as it leaves the ring", () => {
    const acks = new RecentAcks();
    acks.watch();
    acks.add(1, "orders/v1", "d1", "m1");
    acks.add(0, "orders/v1", "d1", "m1"); // listened and consumed
    expect(acks.has(1, "orders/v1", "d1", "m1")).toBe(true);
    expect(acks.has(0, "orders/v1", "d1", "m1")).toBe(true);
    // The ring turns: the consumed ack leaves first, then the listened one. Watching again keeps the lookups on.
    acks.add(1, "orders/v1", "d1", "x0");
    for (let n = 1; n < ACKED_WINDOW - 2; n++) acks.add(1, "orders/v1", "d1", `x${n}`);
    acks.watch();
    acks.add(1, "orders/v1", "d1", "y");
    expect(acks.has(1, "orders/v1", "d1", "m1")).toBe(false);
    expect(acks.has(0, "orders/v1", "d1", "m1")).toBe(true);
    acks.add(1, "orders/v1", "d1", "z");
    expect(acks.has(0, "orders/v1", "d1", "m1")).toBe(false);
    expect(acks.has(1, "orders/v1", "d1", "x0")).toBe(true);
  });

  it("the same target acked again is found until its newest ack leaves the ring", () => {
    const acks = new RecentAcks();
    acks.watch();
    acks.add(1, "orders/v1", "d1", "m1");
    acks.add(1, "orders/v1", "d1", "m1"); // a redelivery acked again
    acks.add(1, "orders/v1", "d1", "n1");
    acks.watch();
    // The first ack of m1 leaves the ring; its second is still there.
    for (let n = 0; n < ACKED_WINDOW - 3; n++) acks.add(1, "orders/v1", "d1", `x${n}`);
    acks.watch();
    acks.add(1, "orders/v1", "d1", "y");
    expect(acks.has(1, "orders/v1", "d1", "m1")).toBe(true);
    acks.add(1, "orders/v1", "d1", "z");
    expect(acks.has(1, "orders/v1", "d1", "m1")).toBe(false);
    expect(acks.has(1, "orders/v1", "d1", "n1")).toBe(true);
  });

  it(`stops looking up ${ACKED_WINDOW} acks after the last change of link, and indexes the ring again at the next`, () => {
    const acks = new RecentAcks();
    acks.add(1, "orders/v1", "d1", "early");
    acks.watch();
    for (let n = 0; n < ACKED_WINDOW - 1; n++) acks.add(1, "orders/v1", "d1", `x${n}`);
    expect(acks.has(1, "orders/v1", "d1", "early")).toBe(true);
    acks.add(1, "orders/v1", "d1", "last"); // the window's worth since watch(): lookups stop
    expect(acks.has(1, "orders/v1", "d1", "x0")).toBe(false);
    acks.watch();
    expect(acks.has(1, "orders/v1", "d1", "x0")).toBe(true);
    expect(acks.has(1, "orders/v1", "d1", "last")).toBe(true);
    expect(acks.has(1, "orders/v1", "d1", "early")).toBe(false); // it left the ring
    expect([...acks.all()].length).toBe(ACKED_WINDOW);
  });
});
