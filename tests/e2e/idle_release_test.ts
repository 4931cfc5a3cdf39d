/**
 * Durable queues nobody receives from let go of their messages in memory when the broker is quiet
 * after a burst (Pager.releaseIdle(), run by the Reclaimer through `reclaimMemory`): the messages
 * stay stored, count as paged, and come back in order, once each, when a recipient registers.
 */
import { afterEach, expect, it } from "bun:test";
import type { Client } from "../../mod.ts";
import { reclaimMemory } from "../../src/server/reclaim.ts";
import { Cleanup, listenRecorder, type Received, recorder, type TestBroker, waitFor } from "../helpers/broker.ts";

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const CHANNEL = "jobs/v1";
const numbers = (got: Received[]) => got.map((r) => (r.message as { n: unknown }).n);
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

async function sendAll(mq: Client, channel: string, ns: number[]): Promise<void> {
  await Promise.all(ns.map((n) => mq.send(channel, { n })));
}

function queueOf(broker: TestBroker, name = CHANNEL) {
  return broker.broker.queues.get(name)!;
}

/** A consumer of `jobs/v1/1` on a client of its own, once it has received `count` messages. */
async function consumed(broker: TestBroker, count: number, prefetch: number): Promise<Received[]> {
  const got: Received[] = [];
  const consumer = await cleanup.client(broker);
  await consumer.consume(`${CHANNEL}/1`, recorder(got), { prefetch }).ready;
  await waitFor(() => got.length >= count, 10_000);
  return got;
}

it("a durable queue nobody consumes lets go of its messages: they stay stored, and a consumer gets each once, in order, newer sends after them", async () => {
  const broker = cleanup.broker({ durability: "fsync" });
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 50));
  const queue = queueOf(broker);
  expect(queue.live).toBe(50); // under the budget: all in memory

  let collected = 0;
  reclaimMemory(broker.broker, () => collected++);
  expect(collected).toBe(1);
  expect(queue.live).toBe(0);
  expect(queue.backlog.resident).toBe(0);
  expect(queue.backlog.count).toBe(50);
  expect(queue.held).toBe(50);
  expect(broker.broker.diskUsage(CHANNEL).messages).toBe(50);

  // Sent after: stored only too (paged messages are always the newest), and after them in order.
  await sendAll(mq, `${CHANNEL}/1`, range(50, 60));
  expect(queue.live).toBe(0);
  expect(queue.backlog.count).toBe(60);

  const got = await consumed(broker, 60, 7);
  expect(numbers(got)).toEqual(range(0, 60));
  expect(got.every((r) => r.info.nbRequeues === 0)).toBe(true);
  await waitFor(() => broker.broker.diskUsage(CHANNEL).messages === 0);
  expect(queue.backlog.count).toBe(0);
  expect(queue.live).toBe(0);
});

it("a queue already paged beyond its budget lets go of the messages in memory too: they go in front of the paged ones, and come back first", async () => {
  const broker = cleanup.broker({ durability: "fsync", memoryBudgetBytes: 4096 });
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 100));
  const queue = queueOf(broker);
  const resident = queue.live;
  expect(resident).toBeGreaterThan(0); // the budget holds a handful, the store the rest
  expect(queue.backlog.count).toBe(100 - resident);
  expect(broker.broker.releaseIdleQueues()).toBe(resident);
  expect(queue.live).toBe(0);
  expect(queue.backlog.count).toBe(100);
  const got = await consumed(broker, 100, 5);
  expect(numbers(got)).toEqual(range(0, 100));
  await waitFor(() => broker.broker.diskUsage(CHANNEL).messages === 0);
});

it("messages waiting for any listener come back to the first one that listens", async () => {
  const broker = cleanup.broker({ durability: "fsync" });
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/*`, range(0, 20));
  expect(broker.broker.releaseIdleQueues()).toBe(20);
  const got: Received[] = [];
  const listener = await cleanup.client(broker);
  await listener.listen(`${CHANNEL}/*`, listenRecorder(got)).ready;
  await waitFor(() => got.length >= 20, 10_000);
  expect(numbers(got)).toEqual(range(0, 20));
});

it("a queue keeps its messages in memory while someone is registered on it, in memory mode, with a ttl, or with a copy that was delivered", async () => {
  const durable = cleanup.broker({ durability: "fsync", channels: { "cache/v1": { durability: "memory" }, "short/v1": { ttl: 3600 } } });
  const mq = await cleanup.client(durable);
  await sendAll(mq, "cache/v1/1", range(0, 5));
  await sendAll(mq, "short/v1/1", range(0, 5));
  await sendAll(mq, `${CHANNEL}/x`, range(0, 5)); // for an id nobody serves, while a consumer serves y
  const consumer = await cleanup.client(durable);
  const got: Received[] = [];
  await consumer.consume(`${CHANNEL}/y`, recorder(got), { prefetch: 5 }).ready;
  expect(durable.broker.releaseIdleQueues()).toBe(0);
  expect(queueOf(durable, "cache/v1").live).toBe(5);
  expect(queueOf(durable, "short/v1").live).toBe(5);
  expect(queueOf(durable).live).toBe(5);

  // A message nacked back once its consumer went: its copy was delivered, the queue keeps all.
  await sendAll(mq, "once/v1/1", [0, 1]);
  const nacker = await cleanup.client(durable);
  const held: Received[] = [];
  const subscription = nacker.consume("once/v1/1", recorder(held, { ack: false }), { prefetch: 1 });
  await subscription.ready;
  await waitFor(() => held.length === 1);
  held[0]!.done(false);
  await waitFor(() => held.length === 2); // delivered again, nbRequeues 1
  await nacker.disconnect();
  const once = queueOf(durable, "once/v1");
  await waitFor(() => once.depth().waiting === 2);
  expect(durable.broker.releaseIdleQueues()).toBe(0);
  expect(once.live).toBe(2);
});
