/**
 * Durable queues beyond their memory budget, end to end: with a budget of a few KiB, a queue
 * keeps about ten messages in memory and pages the rest to the store, so every test here crosses
 * the memory/disk boundary many times: order, nack with delay, dead-lettering, ttl, the waiting
 * bound, broadcast copies, restart, kill -9 and the disk-space floor.
 */
import { afterEach, expect, it } from "bun:test";
import type { Client } from "../../mod.ts";
import { Cleanup, type Received, recorder, rejection, type TestBroker, waitFor } from "../helpers/broker.ts";
import { type ChildBroker, kill9, spawnBroker, writeBrokerConfig } from "../helpers/crash.ts";
import { TempDirs } from "../helpers/temp_dir.ts";
import { MESSAGE_OVERHEAD_BYTES } from "../../src/server/queue/backlog.ts";

const cleanup = new Cleanup();
const temps = new TempDirs("kitten-paging-");
const children: ChildBroker[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) if (child.proc.exitCode === null && !child.proc.killed) await kill9(child);
  await cleanup.run();
  temps.removeAll();
});

/** About ten small messages fit: everything beyond is paged. */
const BUDGET = 4096;
const CHANNEL = "jobs/v1";

const numbers = (got: Received[]) => got.map((r) => (r.message as { n: unknown }).n);
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

function pagingBroker(overrides: Record<string, unknown> = {}): TestBroker {
  return cleanup.broker({ memoryBudgetBytes: BUDGET, durability: "fsync", ...overrides });
}

/** Sends `{ n }` for every n with many sends in flight (each still confirmed), in order. */
async function sendAll(mq: Client, channel: string, ns: number[]): Promise<void> {
  await Promise.all(ns.map((n) => mq.send(channel, { n })));
}

function backlogOf(broker: TestBroker, queue = CHANNEL) {
  return broker.broker.queues.get(queue)!.backlog;
}

it("paging: a durable queue keeps its memory budget and pages the rest; a consumer gets every message in order", async () => {
  const broker = pagingBroker();
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 300));
  const backlog = backlogOf(broker);
  // Nobody consumes yet: the budget holds a handful, the store everything.
  expect(backlog.count).toBeGreaterThan(250);
  expect(backlog.resident).toBeLessThanOrEqual(BUDGET);
  expect(broker.broker.queues.get(CHANNEL)!.live + backlog.count).toBe(300);
  expect(broker.broker.diskUsage(CHANNEL).messages).toBe(300);

  const got: Received[] = [];
  const consumer = await cleanup.client(broker);
  await consumer.consume(`${CHANNEL}/1`, recorder(got), { prefetch: 5 }).ready;
  await waitFor(() => got.length >= 300, 10_000);
  expect(numbers(got)).toEqual(range(0, 300));
  await waitFor(() => broker.broker.diskUsage(CHANNEL).messages === 0);
  expect(backlog.count).toBe(0);
  expect(backlog.resident).toBe(0);
});

it("paging: messages sent while a consumer drains a paged backlog come after it, in order", async () => {
  const broker = pagingBroker();
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 100));
  const got: Received[] = [];
  const consumer = await cleanup.client(broker);
  await consumer.consume(`${CHANNEL}/1`, recorder(got), { prefetch: 3 }).ready;
  await sendAll(mq, `${CHANNEL}/1`, range(100, 200));
  await waitFor(() => got.length >= 200, 10_000);
  expect(numbers(got)).toEqual(range(0, 200));
});

it("paging: deliveries in flight do not count against the budget: a consumer that acks late still fills its prefetch", async () => {
  const broker = pagingBroker({ prefetch: 200 });
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 150));
  const held: Received[] = [];
  const consumer = await cleanup.client(broker);
  await consumer.consume(`${CHANNEL}/1`, recorder(held, { ack: false }), { prefetch: 200 }).ready;
  // Far more than the budget holds, all in flight at once; then acked, nothing is left.
  await waitFor(() => held.length === 150, 10_000);
  expect(numbers(held)).toEqual(range(0, 150));
  expect(backlogOf(broker).count).toBe(0);
  for (const r of held) r.done();
  await waitFor(() => broker.broker.diskUsage(CHANNEL).messages === 0);
});

it("paging: a consumer's messages paged behind messages nobody serves are read past the budget to reach it", async () => {
  const broker = pagingBroker();
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/x`, range(0, 20)); // about two budgets, for an id nobody serves
  await sendAll(mq, `${CHANNEL}/y`, range(100, 105));
  expect(backlogOf(broker).count).toBeGreaterThan(10);
  const got: Received[] = [];
  const consumer = await cleanup.client(broker);
  await consumer.consume(`${CHANNEL}/y`, recorder(got), { prefetch: 5 }).ready;
  await waitFor(() => got.length === 5, 5000);
  expect(numbers(got)).toEqual(range(100, 105));
  // The x messages still wait, in memory past the budget now, none lost.
  const queue = broker.broker.queues.get(CHANNEL)!;
  await waitFor(() => queue.live + queue.backlog.count === 20);
});

it("paging: a paged message nacked with a delay comes back after the delay with nbRequeues 1", async () => {
  const broker = pagingBroker();
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 60));
  expect(backlogOf(broker).count).toBeGreaterThan(40); // message 50 is paged now
  const got: Received[] = [];
  const consumer = await cleanup.client(broker);
  let refused = false;
  await consumer.consume(`${CHANNEL}/1`, (error, message, done, info) => {
    if (error) return;
    got.push({ message, info: info!, done, at: performance.now() });
    if ((message as { n: number }).n === 50 && !refused) {
      refused = true;
      done(false, 0.2);
    } else done();
  }, { prefetch: 4 }).ready;
  await waitFor(() => got.length >= 61, 10_000);
  const again = got.filter((r) => (r.message as { n: number }).n === 50);
  expect(again.map((r) => r.info.nbRequeues)).toEqual([0, 1]);
  expect(again[1]!.at - again[0]!.at).toBeGreaterThanOrEqual(150);
  expect(numbers(got).slice(0, 60)).toEqual(range(0, 60));
  await waitFor(() => broker.broker.diskUsage(CHANNEL).messages === 0);
});

it("paging: a paged message past requeueLimit is dead-lettered with its deadLetter info", async () => {
  const channels = { [CHANNEL]: { requeueLimit: 1, deadLetter: "dead/v1" } };
  const broker = pagingBroker({ channels });
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 80));
  expect(backlogOf(broker).count).toBeGreaterThan(60);
  const consumer = await cleanup.client(broker);
  const seen: number[] = [];
  await consumer.consume(`${CHANNEL}/1`, (error, message, done) => {
    if (error) return;
    const n = (message as { n: number }).n;
    seen.push(n);
    done(n % 10 !== 5); // 5, 15, …, 75 die
  }, { prefetch: 4 }).ready;
  const dead: Received[] = [];
  await consumer.consume("dead/v1/*", recorder(dead)).ready;
  await waitFor(() => dead.length >= 8, 10_000);
  expect(numbers(dead)).toEqual([5, 15, 25, 35, 45, 55, 65, 75]);
  expect(dead.map((r) => r.info.deadLetter?.reason)).toEqual(Array(8).fill("requeueLimit"));
  expect(dead[7]!.info.deadLetter?.channel).toBe(`${CHANNEL}/1`);
  expect(seen).toEqual(range(0, 80));
  await waitFor(() => broker.broker.diskUsage(CHANNEL).messages === 0 && broker.broker.diskUsage("dead/v1").messages === 0);
});

it("paging: a broadcast gives every registered id its copy of every paged message, in order", async () => {
  const broker = pagingBroker();
  const consumer = await cleanup.client(broker);
  const a: Received[] = [];
  const b: Received[] = [];
  let holdA: (() => void) | null = null;
  // Slow consumers (prefetch 1, a held ack) so the messages pile up and are paged.
  await consumer.consume(`${CHANNEL}/a`, (error, message, done, info) => {
    if (error) return;
    a.push({ message, info: info!, done, at: 0 });
    if (a.length === 1) holdA = () => done();
    else done();
  }, { prefetch: 1 }).ready;
  await consumer.consume(`${CHANNEL}/b`, recorder(b), { prefetch: 1 }).ready;
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/*`, range(0, 100));
  expect(backlogOf(broker).count).toBeGreaterThan(50);
  holdA!();
  await waitFor(() => a.length >= 100 && b.length >= 100, 10_000);
  expect(numbers(a)).toEqual(range(0, 100));
  expect(numbers(b)).toEqual(range(0, 100));
  await waitFor(() => broker.broker.diskUsage(CHANNEL).messages === 0);
});

it("paging: paged messages expire at their ttl once nobody came for them", async () => {
  const broker = pagingBroker({ channels: { [CHANNEL]: { ttl: 0.2 } } });
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 100));
  expect(backlogOf(broker).count).toBeGreaterThan(50);
  await waitFor(() => broker.broker.queues.get(CHANNEL)!.counters.expired === 100, 10_000);
  expect(backlogOf(broker).count).toBe(0);
  await waitFor(() => broker.broker.diskUsage(CHANNEL).messages === 0);
});

it("paging: a paged message past its ttl expires when read back, even for a consumer registered since", async () => {
  const broker = pagingBroker({ channels: { [CHANNEL]: { ttl: 0.3, deadLetter: "dead/v1" } } });
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 100));
  const sentAt = Date.now();
  expect(backlogOf(broker).count).toBeGreaterThan(50);
  const queue = broker.broker.queues.get(CHANNEL)!;
  // The ones in memory expire at a tick; then every paged one is past its ttl too.
  await waitFor(() => queue.counters.expired > 0 && Date.now() > sentAt + 300, 5000);
  const got: Received[] = [];
  const dead: Received[] = [];
  const consumer = await cleanup.client(broker);
  await consumer.consume(`${CHANNEL}/1`, recorder(got), { prefetch: 5 }).ready;
  await consumer.consume("dead/v1/*", recorder(dead), { prefetch: 50 }).ready;
  await waitFor(() => queue.counters.expired === 100 && dead.length === 100, 10_000).catch((error: Error) => {
    // Where it stood, for a failure that does not come back when run again.
    const backlog = backlogOf(broker);
    throw new Error(`${error.message}; expired ${queue.counters.expired}, dead-lettered and delivered ${dead.length}, ` +
      `delivered alive ${got.length}, still paged ${backlog.count}, in memory ${queue.depth().ready}`);
  });
  expect(got).toEqual([]);
  expect(numbers(dead)).toEqual(range(0, 100));
  expect(dead.every((r) => r.info.deadLetter?.reason === "ttl")).toBe(true);
});

it("paging: maxItemsInQueue counts paged messages and drops the oldest first", async () => {
  const broker = pagingBroker({ channels: { [CHANNEL]: { maxItemsInQueue: 30 } } });
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 100));
  const queue = broker.broker.queues.get(CHANNEL)!;
  await waitFor(() => queue.counters.dropped === 70, 5000);
  expect(queue.live + queue.backlog.count).toBe(30);
  const got: Received[] = [];
  const consumer = await cleanup.client(broker);
  await consumer.consume(`${CHANNEL}/1`, recorder(got), { prefetch: 5 }).ready;
  await waitFor(() => got.length >= 30, 10_000);
  expect(numbers(got)).toEqual(range(70, 100));
});

it("paging: a restart reads one page, not the backlog, and delivers everything in order", async () => {
  const data = temps.make();
  const first = pagingBroker({ dataDirectory: data });
  const mq = await cleanup.client(first);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 500));
  await mq.disconnect();
  await first.stop();

  const second = pagingBroker({ dataDirectory: data });
  const queue = second.broker.queues.get(CHANNEL)!;
  expect(queue.live).toBeLessThanOrEqual(Math.ceil(BUDGET / MESSAGE_OVERHEAD_BYTES));
  expect(queue.live + queue.backlog.count).toBe(500);
  expect(second.logger.lines.some((line) => line.includes("recovered 500 messages"))).toBe(true);
  const got: Received[] = [];
  const consumer = await cleanup.client(second);
  await consumer.consume(`${CHANNEL}/1`, recorder(got), { prefetch: 10 }).ready;
  await waitFor(() => got.length >= 500, 10_000);
  expect(numbers(got)).toEqual(range(0, 500));
});

it("paging: kill -9 while paging loses no confirmed message, and order holds after the restart", async () => {
  const dir = temps.make();
  const configPath = writeBrokerConfig(dir, { memoryBudgetBytes: BUDGET, durability: "fsync" });
  const child = await spawnBroker(configPath);
  children.push(child);
  const mq = await cleanup.client(child);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 400));
  // A consumer half way through the backlog when the broker dies: acks and reads in progress.
  const before: Received[] = [];
  const early = await cleanup.client(child);
  await early.consume(`${CHANNEL}/1`, recorder(before), { prefetch: 5 }).ready;
  await waitFor(() => before.length >= 150, 10_000);
  await kill9(child);
  await early.disconnect();
  await mq.disconnect();

  const restarted = await spawnBroker(configPath);
  children.push(restarted);
  const after: Received[] = [];
  const consumer = await cleanup.client(restarted);
  await consumer.consume(`${CHANNEL}/1`, recorder(after), { prefetch: 10 }).ready;
  const seen = new Set<number>();
  await waitFor(() => {
    for (const n of [...numbers(before), ...numbers(after)]) seen.add(n as number);
    return seen.size === 400;
  }, 10_000);
  // Whatever was not acked before the kill comes again, in order.
  const redelivered = numbers(after) as number[];
  expect(redelivered).toEqual([...redelivered].sort((x, y) => x - y));
  expect(redelivered.at(-1)).toBe(399);
});

it("paging: a slave pages its copies too, and the acks mirrored from the master's consumer empty its store", async () => {
  const master = pagingBroker();
  const slave = pagingBroker({ isMaster: false });
  const hosts = [master.host, slave.host];
  const mq = await cleanup.client(master, { hosts });
  await waitFor(() => mq.status().every((s) => s.connected));
  await sendAll(mq, `${CHANNEL}/1`, range(0, 200));
  await waitFor(() => slave.broker.diskUsage(CHANNEL).messages === 200);
  expect(backlogOf(slave).count).toBeGreaterThan(150);
  const got: Received[] = [];
  const consumer = await cleanup.client(master, { hosts });
  await waitFor(() => consumer.status().every((s) => s.connected));
  await consumer.consume(`${CHANNEL}/1`, recorder(got), { prefetch: 10 }).ready;
  await waitFor(() => got.length >= 200, 10_000);
  expect(numbers(got)).toEqual(range(0, 200));
  // Acks of messages the slave had paged wait there until it reads them back; then nothing is left.
  await waitFor(() => slave.broker.diskUsage(CHANNEL).messages === 0 && backlogOf(slave).count === 0, 10_000);
  expect(slave.broker.queues.get(CHANNEL)!.live).toBe(0);
});

it("minFreeDiskBytes: sends to a durable queue are refused with DISK_FULL below the floor; memory queues still take sends", async () => {
  const broker = pagingBroker({
    minFreeDiskBytes: Number.MAX_SAFE_INTEGER,
    channels: { "fast/v1": { durability: "memory" } },
  });
  const mq = await cleanup.client(broker);
  const error = await rejection(mq.send(`${CHANNEL}/1`, { n: 1 }));
  expect(error.code).toBe("DISK_FULL");
  expect(error.message).toStartWith(`Cannot send to "${CHANNEL}/1": the disk of the data directory`);
  expect(error.message).toContain("below minFreeDiskBytes");
  await mq.send("fast/v1/1", { n: 2 });
  expect(broker.broker.queues.get("fast/v1")!.live).toBe(1);
});

it("memory queues are not paged: they hold every message in memory up to maxMessagesPerQueue", async () => {
  const broker = pagingBroker({ durability: "memory", maxMessagesPerQueue: 50 });
  const mq = await cleanup.client(broker);
  await sendAll(mq, `${CHANNEL}/1`, range(0, 50));
  const queue = broker.broker.queues.get(CHANNEL)!;
  expect(queue.live).toBe(50);
  expect(queue.backlog.count).toBe(0);
  const error = await rejection(mq.send(`${CHANNEL}/1`, { n: 50 }));
  expect(error.code).toBe("QUEUE_FULL");
});
