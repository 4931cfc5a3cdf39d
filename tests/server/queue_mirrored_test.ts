/**
 * A slave's copies, held for its master (queue/mirrored_copies.ts): the master's requeues
 * (REQUEUED) count the deliveries and hold delayed messages back here too, so that a promotion
 * goes on as the master would have; the master's removal and its consumers' mirrored acks still
 * drop them.
 */
import { describe, expect, it } from "bun:test";
import { Message } from "../../src/server/queue/message.ts";
import { type Harness, setup } from "./_queue_harness.ts";

/** A queue as a slave holds it: deliveries closed, every message tracked (copies kept). */
function slave() {
  const t = setup();
  t.queue.mirroring = true;
  let seq = 0;
  const mirrored = (destination = "x") => {
    const message = new Message(`r${seq}`, "orders/v1", destination, new Uint8Array([seq]), t.now, seq++);
    message.copies = []; // what Mirror.track() does
    t.queue.publish(message);
    return message;
  };
  return { t, mirrored };
}

/** Promotion, as far as the queue sees it: it delivers from now on. */
function promote(t: Harness, ...sinks: { open: boolean }[]) {
  t.queue.mirroring = false;
  for (const sink of sinks) sink.open = true;
  for (const handler of t.queue.handlers()) t.queue.pump(handler);
}

describe("MirroredCopies", () => {
  it("a ready copy of a message the master delayed waits out the delay here; promoted, the queue hands it out only once due", () => {
    const { t, mirrored } = slave();
    const sink = t.sink();
    sink.open = false; // a slave delivers nothing
    const a = t.consumer("a", ["x"], 10, sink);
    const late = mirrored();
    const other = mirrored();
    expect(t.queue.depth()).toEqual({ ready: 2, inflight: 0, delayed: 0, waiting: 0 });

    t.queue.mirrored.requeued(late, 1, t.now + 5_000);
    expect(late.notBefore).toBe(t.now + 5_000);
    expect(t.queue.depth()).toEqual({ ready: 1, inflight: 0, delayed: 1, waiting: 0 });

    promote(t, sink);
    expect(t.idsOf(a)).toEqual([other.id]);
    t.advance(4_999);
    expect(t.idsOf(a)).toEqual([other.id]);
    t.advance(1);
    expect(t.idsOf(a)).toEqual([other.id, late.id]);
  });

  it("a copy waiting for a recipient keeps the delay: a consumer that registers after the promotion gets it once due", () => {
    const { t, mirrored } = slave();
    const message = mirrored();
    expect(t.queue.depth().waiting).toBe(1);
    t.queue.mirrored.requeued(message, 1, t.now + 3_000);
    expect(t.queue.depth().waiting).toBe(1); // held back when it is routed, not before

    promote(t);
    const a = t.consumer("a", ["x"], 10);
    expect(t.idsOf(a)).toEqual([]);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 0, delayed: 1, waiting: 0 });
    t.advance(3_000);
    expect(t.idsOf(a)).toEqual([message.id]);
  });

  it("a later delay of the same message holds a delayed copy back until the later time", () => {
    const { t, mirrored } = slave();
    const sink = t.sink();
    sink.open = false;
    t.consumer("a", ["x"], 10, sink);
    const message = mirrored();
    t.queue.mirrored.requeued(message, 1, t.now + 1_000);
    t.queue.mirrored.requeued(message, 2, t.now + 4_000);
    t.advance(1_000);
    expect(t.queue.depth()).toEqual({ ready: 0, inflight: 0, delayed: 1, waiting: 0 });
    t.advance(3_000);
    expect(t.queue.depth()).toEqual({ ready: 1, inflight: 0, delayed: 0, waiting: 0 });
  });

  it("the master's removal, or its consumer's mirrored ack, drops a delayed copy: nothing comes back when it is due", () => {
    const { t, mirrored } = slave();
    const sink = t.sink();
    sink.open = false;
    const a = t.consumer("a", ["x"], 10, sink);
    const removed = mirrored();
    const acked = mirrored();
    t.queue.mirrored.requeued(removed, 1, t.now + 1_000);
    t.queue.mirrored.requeued(acked, 1, t.now + 1_000);
    expect(t.queue.depth().delayed).toBe(2);

    t.queue.mirrored.removed(removed);
    expect(t.queue.mirrored.acked(acked, a.groupKey, "x")).toBe(true);
    expect(t.settled).toEqual([removed.id, acked.id]);
    expect(t.queue.depth().delayed).toBe(0);
    promote(t, sink);
    t.advance(1_000);
    expect(t.idsOf(a)).toEqual([]);
    expect(t.queue.live).toBe(0);
  });

  it("a requeue counts the deliveries: promoted, the next delivery is one more, and past requeueLimit the message is dead", () => {
    const { t, mirrored } = slave();
    const sink = t.sink();
    sink.open = false;
    const a = t.consumer("a", ["x"], 10, sink);
    const counted = mirrored();
    const dying = mirrored();
    t.queue.mirrored.requeued(counted, 2, 0); // nacked at once twice, or twice past its ack deadline
    t.queue.mirrored.requeued(dying, 4, 0); // requeueLimit is 5: nacked after its fifth delivery, it dies
    t.queue.mirrored.requeued(counted, 1, 0); // an older count changes nothing
    expect(t.queue.depth()).toEqual({ ready: 2, inflight: 0, delayed: 0, waiting: 0 });

    promote(t, sink);
    expect(t.log.map((d) => [d.id, d.deliveries])).toEqual([[counted.id, 3], [dying.id, 5]]);
    t.queue.nack(t.inflight(a)[1]!, 0);
    expect(t.dead).toEqual([{ id: dying.id, destination: "x", reason: "requeueLimit" }]);
  });
});
