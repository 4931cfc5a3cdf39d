import { afterEach, expect, it } from "bun:test";
import { Cleanup, listenRecorder, type Received, recorder, waitFor } from "../helpers/broker.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

it("e2e: messages with no recipient wait and reach a late consumer in order", async () => {
  const broker = cleanup.broker();
  const sender = await cleanup.client(broker);
  for (let i = 0; i < 10; i++) await sender.send("late/v1/1", i);
  const queue = broker.broker.queues.get("late/v1")!;
  expect(queue.depth().waiting).toBe(10);

  const worker = await cleanup.client(broker);
  const got: Received[] = [];
  await worker.consume("late/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === 10);
  expect(got.map((r) => r.message)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  await waitFor(() => queue.live === 0);
});

it("e2e: waiting messages are kept per id: a consumer of another id does not take them", async () => {
  const broker = cleanup.broker();
  const sender = await cleanup.client(broker);
  await sender.send("perid/v1/1", "for 1");
  await sender.send("perid/v1/2", "for 2");
  const worker = await cleanup.client(broker);
  const got: Received[] = [];
  await worker.consume("perid/v1/2", recorder(got)).ready;
  await waitFor(() => got.length === 1);
  expect(got[0]!.message).toBe("for 2");
  expect(broker.broker.queues.get("perid/v1")!.waitingById()).toEqual(new Map([["1", 1]]));
});

it("e2e: waiting messages, including those sent to *, reach a late consumer in order", async () => {
  const broker = cleanup.broker();
  const sender = await cleanup.client(broker);
  await sender.send("mixw/v1/7", "a");
  await sender.send("mixw/v1/*", "b (broadcast)");
  await sender.send("mixw/v1/7", "c");
  await sender.send("mixw/v1/*", "d (broadcast)");
  const worker = await cleanup.client(broker);
  const got: Received[] = [];
  await worker.consume("mixw/v1/7", recorder(got)).ready;
  await waitFor(() => got.length === 4);
  expect(got.map((r) => r.message)).toEqual(["a", "b (broadcast)", "c", "d (broadcast)"]);
  expect(got.every((r) => r.info.channel.id === "7")).toBe(true);
});

it("e2e: waiting messages reach a late listener too", async () => {
  const broker = cleanup.broker();
  const sender = await cleanup.client(broker);
  await sender.send("latel/v1/1", 1);
  await sender.send("latel/v1/*", 2);
  const listener = await cleanup.client(broker);
  const got: Received[] = [];
  await listener.listen("latel/v1/*", listenRecorder(got)).ready;
  await waitFor(() => got.length === 2);
  expect(got.map((r) => r.message)).toEqual([1, 2]);
});

it("e2e: maxItemsInQueue drops the oldest waiting messages first", async () => {
  const broker = cleanup.broker({ maxItemsInQueue: 3 });
  const sender = await cleanup.client(broker);
  for (let i = 0; i < 5; i++) await sender.send("full/v1/1", i);
  const queue = broker.broker.queues.get("full/v1")!;
  expect(queue.counters.dropped).toBe(2);
  expect(queue.depth().waiting).toBe(3);
  expect(broker.logger.lines.filter((l) => l.includes("reason=overflow"))).toHaveLength(2);

  const worker = await cleanup.client(broker);
  const got: Received[] = [];
  await worker.consume("full/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === 3);
  expect(got.map((r) => r.message)).toEqual([2, 3, 4]);
  await waitFor(() => queue.live === 0);
});

it("e2e: maxItemsInQueue bounds the waiting messages of the whole queue, across ids", async () => {
  const broker = cleanup.broker({ maxItemsInQueue: 2 });
  const sender = await cleanup.client(broker);
  await sender.send("fullq/v1/a", "a1");
  await sender.send("fullq/v1/b", "b1");
  await sender.send("fullq/v1/c", "c1");
  const queue = broker.broker.queues.get("fullq/v1")!;
  expect(queue.depth().waiting).toBe(2);
  expect(queue.waitingById()).toEqual(new Map([["b", 1], ["c", 1]]));
});

it("e2e: a channel ttl expires waiting messages", async () => {
  const broker = cleanup.broker({ channels: { "ttl/v1": { ttl: 0.2 } } });
  const sender = await cleanup.client(broker);
  const sentAt = performance.now();
  await sender.send("ttl/v1/1", "stale");
  const queue = broker.broker.queues.get("ttl/v1")!;
  expect(queue.depth().waiting).toBe(1);
  await waitFor(() => queue.counters.expired === 1, 2000);
  expect(performance.now() - sentAt).toBeGreaterThanOrEqual(190);
  expect(queue.depth().waiting).toBe(0);
  expect(broker.logger.lines.some((l) => l.includes("reason=ttl") && l.includes("message dead"))).toBe(true);

  // A consumer registering now gets only what is sent after the expiry.
  await sender.send("ttl/v1/1", "fresh");
  const worker = await cleanup.client(broker);
  const got: Received[] = [];
  await worker.consume("ttl/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === 1);
  expect(got[0]!.message).toBe("fresh");
  await waitFor(() => queue.live === 0);
  expect(got).toHaveLength(1);
});

it("e2e: a channel ttl does not expire a message before it is due", async () => {
  const broker = cleanup.broker({ channels: { "ttl2/v1": { ttl: 5 } } });
  const sender = await cleanup.client(broker);
  await sender.send("ttl2/v1/1", "kept");
  // The window is the subject: several broker ticks (25 ms) run in it, and none may expire a message
  // due in 5 s. A tick that does nothing has no event to wait for.
  await Bun.sleep(100);
  const worker = await cleanup.client(broker);
  const got: Received[] = [];
  await worker.consume("ttl2/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === 1);
  expect(broker.broker.queues.get("ttl2/v1")!.counters.expired).toBe(0);
});

it("e2e: a late consumer of * receives the waiting messages of every id in arrival order", async () => {
  const broker = cleanup.broker();
  const sender = await cleanup.client(broker);
  await sender.send("lateall/v1/a", "a1");
  await sender.send("lateall/v1/b", "b1");
  await sender.send("lateall/v1/a", "a2");
  await sender.send("lateall/v1/c", "c1");
  const worker = await cleanup.client(broker);
  const got: Received[] = [];
  await worker.consume("lateall/v1/*", recorder(got)).ready;
  await waitFor(() => got.length === 4);
  expect(got.map((r) => r.message)).toEqual(["a1", "b1", "a2", "c1"]);
  expect(got.map((r) => r.info.channel.id)).toEqual(["a", "b", "a", "c"]);
});
