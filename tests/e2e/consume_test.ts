import { afterEach, expect, it } from "bun:test";
import { Cleanup, type Received, recorder, waitFor } from "../helpers/broker.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

it("e2e: consume delivers each message to exactly one consumer", async () => {
  const broker = cleanup.broker();
  const a = await cleanup.client(broker);
  const b = await cleanup.client(broker);
  const sender = await cleanup.client(broker);
  const gotA: Received[] = [];
  const gotB: Received[] = [];
  await a.consume("jobs/v1/1", recorder(gotA)).ready;
  await b.consume("jobs/v1/1", recorder(gotB)).ready;

  await Promise.all(Array.from({ length: 20 }, (_, i) => sender.send("jobs/v1/1", { n: i })));
  await waitFor(() => gotA.length + gotB.length === 20);
  await waitFor(() => broker.broker.queues.get("jobs/v1")!.depth().inflight === 0);

  const seen = [...gotA, ...gotB].map((r) => (r.message as { n: number }).n).sort((x, y) => x - y);
  expect(seen).toEqual(Array.from({ length: 20 }, (_, i) => i));
  expect(gotA.length).toBeGreaterThan(0);
  expect(gotB.length).toBeGreaterThan(0);
  expect([...gotA, ...gotB].every((r) => r.info.nbRequeues === 0)).toBe(true);
});

it("e2e: consume round-robins across consumers of an id, earliest registrant first", async () => {
  const broker = cleanup.broker({ prefetch: 10 });
  const a = await cleanup.client(broker);
  const b = await cleanup.client(broker);
  const sender = await cleanup.client(broker);
  // Two sockets may interleave their arrivals here, so who got which message is recorded by value.
  const owner: string[] = [];
  await a.consume("jobs/v1/7", (_e, m, done) => ((owner[m as number] = "a"), done()), { prefetch: 10 }).ready;
  await b.consume("jobs/v1/7", (_e, m, done) => ((owner[m as number] = "b"), done()), { prefetch: 10 }).ready;

  for (let i = 0; i < 6; i++) await sender.send("jobs/v1/7", i);
  await waitFor(() => owner.filter(Boolean).length === 6);
  expect(owner).toEqual(["a", "b", "a", "b", "a", "b"]);
});

it("e2e: consume round-robins between consumers of an id and consumers of *", async () => {
  const broker = cleanup.broker({ prefetch: 10 });
  const onId = await cleanup.client(broker);
  const onAll = await cleanup.client(broker);
  const sender = await cleanup.client(broker);
  const owner: string[] = [];
  await onAll.consume("jobs/v1/*", (_e, m, done) => ((owner[m as number] = "all"), done()), { prefetch: 10 }).ready;
  await onId.consume("jobs/v1/7", (_e, m, done) => ((owner[m as number] = "id"), done()), { prefetch: 10 }).ready;

  // Sent without waiting: both consumers have free prefetch slots, so the cursor alone decides.
  await Promise.all([0, 1, 2, 3].map((i) => sender.send("jobs/v1/7", i)));
  await waitFor(() => owner.filter(Boolean).length === 4);
  expect(owner).toEqual(["all", "id", "all", "id"]);

  // Another id only reaches the consumer of `*`.
  await sender.send("jobs/v1/8", 4);
  await waitFor(() => owner.filter(Boolean).length === 5);
  expect(owner[4]).toBe("all");
});

it("e2e: consume on * receives the destination id in info.channel", async () => {
  const broker = cleanup.broker();
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.consume("jobs/v1/*", recorder(got)).ready;
  await mq.send("jobs/v1/order-42", { a: 1 });
  await waitFor(() => got.length === 1);
  expect(got[0]!.message).toEqual({ a: 1 });
  expect(got[0]!.info.channel).toEqual({ endpoint: "jobs", version: "v1", id: "order-42" });
  expect(got[0]!.info.nbRequeues).toBe(0);
  expect(typeof got[0]!.info.messageId).toBe("string");
  expect(Math.abs(got[0]!.info.created - Date.now())).toBeLessThan(2000);
});

it("e2e: consume keeps FIFO order for a single consumer", async () => {
  const broker = cleanup.broker();
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.consume("fifo/v1/1", recorder(got)).ready;
  const sends: Promise<void>[] = [];
  for (let i = 0; i < 100; i++) sends.push(mq.send("fifo/v1/1", i));
  await Promise.all(sends);
  await waitFor(() => got.length === 100);
  expect(got.map((r) => r.message)).toEqual(Array.from({ length: 100 }, (_, i) => i));
});

it("e2e: consume prefetch is per handler: a consumer that never acks does not stall the others", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const stuck = await cleanup.client(broker);
  const busy = await cleanup.client(broker);
  const sender = await cleanup.client(broker);
  const gotStuck: Received[] = [];
  const gotBusy: Received[] = [];
  await stuck.consume("work/v1/1", recorder(gotStuck, { ack: false })).ready;
  await busy.consume("work/v1/1", recorder(gotBusy)).ready;

  for (let i = 0; i < 6; i++) await sender.send("work/v1/1", i);
  await waitFor(() => gotBusy.length === 5);
  expect(gotStuck.map((r) => r.message)).toEqual([0]);
  expect(gotBusy.map((r) => r.message)).toEqual([1, 2, 3, 4, 5]);
});

it("e2e: consume({prefetch}) bounds the unacked deliveries one handler holds", async () => {
  const broker = cleanup.broker({ prefetch: 5, requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  const subscription = mq.consume("pf/v1/1", recorder(got, { ack: false }), { prefetch: 3 });
  expect(subscription.prefetch).toBeNull(); // not answered yet
  await subscription.ready;
  expect(subscription.prefetch).toBe(3); // granted as asked: under the channel's 5
  for (let i = 0; i < 6; i++) await mq.send("pf/v1/1", i);
  await waitFor(() => got.length === 3);
  const queue = broker.broker.queues.get("pf/v1")!;
  expect(queue.depth()).toMatchObject({ inflight: 3, ready: 3 });

  // Acking one frees one slot: exactly one more delivery, the next in order.
  got[0]!.done();
  await waitFor(() => got.length === 4);
  expect(got.map((r) => r.message)).toEqual([0, 1, 2, 3]);
  expect(queue.depth()).toMatchObject({ inflight: 3, ready: 2 });
});

it("e2e: consume prefetch above the channel limit is capped by the broker, and the subscription says so", async () => {
  const broker = cleanup.broker({ prefetch: 2, requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  const capped = mq.consume("cap/v1/1", recorder(got, { ack: false }), { prefetch: 50 });
  await capped.ready;
  expect(capped.prefetch).toBe(2);
  const unasked = mq.consume("cap/v1/2", recorder([], { ack: false }));
  await unasked.ready;
  expect(unasked.prefetch).toBe(2); // the channel's, when none is asked
  const listener = mq.listen("cap/v1/3", () => {});
  await listener.ready;
  expect(listener.prefetch).toBe(1000); // listenerPrefetch's default
  for (let i = 0; i < 5; i++) await mq.send("cap/v1/1", i);
  await waitFor(() => got.length === 2);
  expect(broker.broker.queues.get("cap/v1")!.depth()).toMatchObject({ inflight: 2, ready: 3 });
});

it("e2e: a disconnecting consumer's unacked deliveries go to another consumer at once", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const leaving = await cleanup.client(broker);
  const staying = await cleanup.client(broker);
  const sender = await cleanup.client(broker);
  const gotLeaving: Received[] = [];
  const gotStaying: Received[] = [];
  await leaving.consume("hand/v1/1", recorder(gotLeaving, { ack: false })).ready;
  await sender.send("hand/v1/1", "precious");
  await waitFor(() => gotLeaving.length === 1);
  await staying.consume("hand/v1/1", recorder(gotStaying)).ready;
  expect(gotStaying).toHaveLength(0);

  const start = performance.now();
  await leaving.disconnect();
  await waitFor(() => gotStaying.length === 1, 1500);
  expect(performance.now() - start).toBeLessThan(1500); // requeueInterval is 100 s
  expect(gotStaying[0]!.message).toBe("precious");
  expect(gotStaying[0]!.info.messageId).toBe(gotLeaving[0]!.info.messageId);
  expect(gotStaying[0]!.info.nbRequeues).toBe(1);
});

it("e2e: consume subscription close() hands its unacked deliveries to another consumer", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  const other = await cleanup.client(broker);
  const first: Received[] = [];
  const second: Received[] = [];
  const sub = mq.consume("close/v1/1", recorder(first, { ack: false }));
  await sub.ready;
  await mq.send("close/v1/1", "m");
  await waitFor(() => first.length === 1);
  await other.consume("close/v1/1", recorder(second)).ready;
  await sub.close();
  await waitFor(() => second.length === 1);
  expect(second[0]!.message).toBe("m");

  await mq.send("close/v1/1", "after close");
  await waitFor(() => second.length === 2);
  expect(first).toHaveLength(1);
});

it("e2e: a disconnecting consumer's unacked delivery waits for the next consumer when none is left", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const leaving = await cleanup.client(broker);
  const got: Received[] = [];
  await leaving.consume("orphan/v1/1", recorder(got, { ack: false })).ready;
  await leaving.send("orphan/v1/1", "kept");
  await waitFor(() => got.length === 1);
  await leaving.disconnect();
  const queue = broker.broker.queues.get("orphan/v1")!;
  await waitFor(() => queue.depth().waiting === 1);

  const next = await cleanup.client(broker);
  const gotNext: Received[] = [];
  await next.consume("orphan/v1/1", recorder(gotNext)).ready;
  await waitFor(() => gotNext.length === 1);
  expect(gotNext[0]!.message).toBe("kept");
  expect(gotNext[0]!.info.nbRequeues).toBe(1);
  await waitFor(() => queue.live === 0);
});
