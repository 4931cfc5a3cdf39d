/**
 * Durability end to end: recovery at start, and the memory, batch and fsync modes. Store failures
 * and stops have files of their own; the shared setup is tests/helpers/durability.ts.
 */
import { expect, it } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import {
  drain,
  type Received,
  recorder,
  sleep,
  waitFor,
} from "../helpers/broker.ts";
import { kill9, spawnBroker, writeBrokerConfig } from "../helpers/crash.ts";
import { STORE_FILE } from "../../src/server/store/record.ts";
import { SqliteStore } from "../../src/server/store/sqlite_store.ts";
import { durabilityFixture, live, numbers, range, sendAll } from "../helpers/durability.ts";

const { cleanup, temps, children } = durabilityFixture();

// ── recovery ───────────────────────────────────────────────────────────────────────────────────

it("durability: 50 confirmed messages survive a restart and are delivered in order", async () => {
  const data = temps.make();
  const first = cleanup.broker({ dataDirectory: data });
  const sender = await cleanup.client(first);
  await sendAll(sender, "jobs/v1/1", range(0, 50));
  await first.stop();
  await sender.disconnect();

  const second = cleanup.broker({ dataDirectory: data });
  expect(live(second, "jobs/v1")).toBe(50);
  expect(second.broker.queues.get("jobs/v1")!.depth().waiting).toBe(50);
  const got: Received[] = [];
  const consumer = await cleanup.client(second);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await waitFor(() => got.length >= 50);
  await drain(consumer, "jobs/v1/1", got); // nothing more (no duplicate) arrives
  expect(numbers(got)).toEqual(range(0, 50));
  expect(got.every((r) => r.info.channel.id === "1")).toBe(true);
});

it("durability: a delivery in flight at stop is delivered again after the restart", async () => {
  const data = temps.make();
  const first = cleanup.broker({ dataDirectory: data });
  const mq = await cleanup.client(first);
  await mq.send("jobs/v1/1", { n: 1 });
  const held: Received[] = [];
  await mq.consume("jobs/v1/1", recorder(held, { ack: false })).ready;
  await waitFor(() => held.length === 1);
  expect(first.broker.inflight()).toBe(1);
  await first.stop(); // the consumer never acked
  await mq.disconnect();

  const second = cleanup.broker({ dataDirectory: data });
  expect(live(second, "jobs/v1")).toBe(1);
  const got: Received[] = [];
  const consumer = await cleanup.client(second);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === 1);
  expect(got[0]!.message).toEqual({ n: 1 });
  expect(got[0]!.info.messageId).toBe(held[0]!.info.messageId);
});

it("durability: the delivery count of a message in flight at stop survives the restart (nbRequeues)", async () => {
  // A restart reloads every unacked and waiting message, in order, with its delivery count.
  const data = temps.make();
  const first = cleanup.broker({ dataDirectory: data });
  const mq = await cleanup.client(first);
  await mq.send("jobs/v1/1", { n: 1 });
  const held: Received[] = [];
  await mq.consume("jobs/v1/1", recorder(held, { ack: false })).ready;
  await waitFor(() => held.length === 1);
  expect(held[0]!.info.nbRequeues).toBe(0);
  await first.stop();
  await mq.disconnect();

  const second = cleanup.broker({ dataDirectory: data });
  const got: Received[] = [];
  const consumer = await cleanup.client(second);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === 1);
  expect(got[0]!.info.nbRequeues).toBe(1);
});

it("durability: stopping the broker does not count against requeueLimit (an in-flight message is not killed)", async () => {
  // requeueLimit 1 and no deadLetter: if the stop counted as a failed delivery the message would
  // die and be deleted, a confirmed message lost by a clean stop.
  const data = temps.make();
  const channels = { "jobs/v1": { requeueLimit: 1 } };
  const first = cleanup.broker({ dataDirectory: data, channels });
  const mq = await cleanup.client(first);
  await mq.send("jobs/v1/1", { n: 1 });
  const held: Received[] = [];
  await mq.consume("jobs/v1/1", recorder(held, { ack: false })).ready;
  await waitFor(() => held.length === 1);
  await first.stop();
  await mq.disconnect();
  expect(first.logger.lines.filter((line) => line.includes("message dead"))).toEqual([]);

  const second = cleanup.broker({ dataDirectory: data, channels });
  expect(live(second, "jobs/v1")).toBe(1);
});

it("durability: acked messages are not recovered; dead-lettered ones come back in the dead-letter queue only", async () => {
  const data = temps.make();
  const channels = { "jobs/v1": { deadLetter: "dead/v1", requeueLimit: 1 } };
  const first = cleanup.broker({ dataDirectory: data, channels });
  const mq = await cleanup.client(first);
  await sendAll(mq, "jobs/v1/1", [0, 1, 2, 3]);
  // Acks the even ones, refuses the odd ones: past requeueLimit 1 they die into dead/v1.
  const seen: number[] = [];
  await mq.consume("jobs/v1/1", (error, message, done) => {
    if (error) return;
    const n = (message as { n: number }).n;
    seen.push(n);
    done(n % 2 === 0);
  }).ready;
  await waitFor(() => seen.length === 4 && live(first, "jobs/v1") === 0 && live(first, "dead/v1") === 2);
  await first.stop();
  await mq.disconnect();

  const second = cleanup.broker({ dataDirectory: data, channels });
  expect(live(second, "jobs/v1")).toBe(0);
  expect(live(second, "dead/v1")).toBe(2);
  const jobs: Received[] = [];
  const dead: Received[] = [];
  const consumer = await cleanup.client(second);
  await consumer.consume("jobs/v1/*", recorder(jobs)).ready;
  await consumer.consume("dead/v1/*", recorder(dead)).ready;
  await waitFor(() => dead.length === 2);
  await drain(consumer, "jobs/v1/1", jobs);
  expect(jobs).toEqual([]);
  expect(numbers(dead)).toEqual([1, 3]);
  expect(dead.every((r) => r.info.channel.id === "1")).toBe(true);
});

it("durability: a recovered dead letter keeps its deadLetter info (reason, channel, messageId)", async () => {
  const data = temps.make();
  const channels = { "jobs/v1": { deadLetter: "dead/v1", requeueLimit: 1 } };
  const first = cleanup.broker({ dataDirectory: data, channels });
  const mq = await cleanup.client(first);
  await mq.send("jobs/v1/1", { n: 1 });
  const before: Received[] = [];
  await mq.consume("jobs/v1/1", (error, _message, done, info) => {
    if (error) return;
    before.push({ message: null, info: info!, done, at: 0 });
    done(false);
  }).ready;
  await waitFor(() => live(first, "dead/v1") === 1);
  await first.stop();
  await mq.disconnect();

  const second = cleanup.broker({ dataDirectory: data, channels });
  const dead: Received[] = [];
  const consumer = await cleanup.client(second);
  await consumer.consume("dead/v1/*", recorder(dead)).ready;
  await waitFor(() => dead.length === 1);
  expect(dead[0]!.info.deadLetter).toEqual({
    reason: "requeueLimit",
    channel: "jobs/v1/1",
    messageId: before[0]!.info.messageId,
    deliveries: 1,
  });
});

it("durability: recovery keeps waiting messages beyond a smaller maxItemsInQueue", async () => {
  const data = temps.make();
  const first = cleanup.broker({ dataDirectory: data, maxItemsInQueue: 1000 });
  const sender = await cleanup.client(first);
  await sendAll(sender, "jobs/v1/1", range(0, 30));
  await first.stop();
  await sender.disconnect();

  const second = cleanup.broker({ dataDirectory: data, maxItemsInQueue: 10 });
  expect(live(second, "jobs/v1")).toBe(30);
  expect(second.broker.queues.get("jobs/v1")!.counters.dropped).toBe(0);
  const got: Received[] = [];
  const consumer = await cleanup.client(second);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await waitFor(() => got.length >= 30);
  expect(numbers(got)).toEqual(range(0, 30));
});

// ── modes ──────────────────────────────────────────────────────────────────────────────────────

it("durability: memory mode creates no store file, and a restart has nothing", async () => {
  const data = temps.make();
  const first = cleanup.broker({ dataDirectory: data, durability: "memory" });
  expect(first.broker.store).toBeNull();
  const sender = await cleanup.client(first);
  await sendAll(sender, "jobs/v1/1", [0, 1, 2]);
  expect(live(first, "jobs/v1")).toBe(3);
  expect(existsSync(join(data, STORE_FILE))).toBe(false);
  await first.stop();
  await sender.disconnect();

  const second = cleanup.broker({ dataDirectory: data, durability: "memory" });
  expect(second.broker.store).toBeNull();
  expect(live(second, "jobs/v1")).toBe(0);
  const got: Received[] = [];
  const consumer = await cleanup.client(second);
  await consumer.consume("jobs/v1/*", recorder(got)).ready;
  await drain(consumer, "jobs/v1/1", got);
  expect(got).toEqual([]);
  expect(existsSync(join(data, STORE_FILE))).toBe(false);
});

it("durability: a memory channel in an fsync broker loses its messages on restart, the others' survive", async () => {
  const data = temps.make();
  const channels = { "x/v1": { durability: "memory" } };
  const first = cleanup.broker({ dataDirectory: data, channels });
  const sender = await cleanup.client(first);
  await sendAll(sender, "x/v1/1", [0, 1]);
  await sendAll(sender, "y/v1/1", [10, 11]);
  await sendAll(sender, "x/v1/1", [2]);
  await first.stop();
  await sender.disconnect();

  const second = cleanup.broker({ dataDirectory: data, channels });
  expect(live(second, "x/v1")).toBe(0);
  expect(live(second, "y/v1")).toBe(2);
  const x: Received[] = [];
  const y: Received[] = [];
  const consumer = await cleanup.client(second);
  await consumer.consume("x/v1/*", recorder(x)).ready;
  await consumer.consume("y/v1/*", recorder(y)).ready;
  await waitFor(() => y.length === 2);
  await drain(consumer, "x/v1/1", x);
  await drain(consumer, "y/v1/1", y);
  expect(numbers(y)).toEqual([10, 11]);
  expect(x).toEqual([]);
});

it("durability: switching a broker with stored messages to memory mode still delivers them", async () => {
  const data = temps.make();
  const first = cleanup.broker({ dataDirectory: data });
  const sender = await cleanup.client(first);
  await sendAll(sender, "jobs/v1/1", [0, 1]);
  await first.stop();
  await sender.disconnect();

  const second = cleanup.broker({ dataDirectory: data, durability: "memory" });
  expect(live(second, "jobs/v1")).toBe(2);
  const got: Received[] = [];
  const consumer = await cleanup.client(second);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await waitFor(() => got.length >= 2);
  expect(numbers(got)).toEqual([0, 1]);
});

it("durability: batch mode confirms before the commit, and commits within commitIntervalMs", async () => {
  const data = temps.make();
  const broker = cleanup.broker({ dataDirectory: data, durability: "batch", commitIntervalMs: 1000 });
  const store = broker.broker.store as SqliteStore;
  expect(store.mode).toBe("batch");
  const sender = await cleanup.client(broker);
  // A commit writes the journal (journal.ts), or the database when it settles the journal.
  const commits = () => store.stats.commits + store.stats.journalWrites;
  const before = commits();
  const started = performance.now();
  await sender.send("jobs/v1/1", { n: 1 });
  // Confirmed before the commit: it is still pending and no commit ran.
  expect(store.pending).toBe(1);
  expect(commits()).toBe(before);
  await waitFor(() => store.pending === 0, 5000);
  expect(commits()).toBe(before + 1);
  expect(performance.now() - started).toBeGreaterThanOrEqual(900);
});

it("durability: batch mode — after commitIntervalMs a confirmed message survives kill -9", async () => {
  const dir = temps.make();
  const configPath = writeBrokerConfig(dir, { durability: "batch", commitIntervalMs: 100 });
  const child = await spawnBroker(configPath);
  children.push(child);
  const sender = await cleanup.client(child);
  await sendAll(sender, "jobs/v1/1", range(0, 20));
  // Waiting out the commit interval the test sets is the subject (the broker runs in another
  // process: its commits have no event here). The interval, and a margin.
  await sleep(100 + 250);
  await kill9(child);
  await sender.disconnect();

  const again = cleanup.broker({ dataDirectory: join(dir, "data") });
  expect(live(again, "jobs/v1")).toBe(20);
  const got: Received[] = [];
  const consumer = await cleanup.client(again);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await waitFor(() => got.length >= 20);
  expect(numbers(got)).toEqual(range(0, 20));
});

it("durability: fsync mode — a confirmed message survives kill -9 at once, and an unacked delivery comes back", async () => {
  const dir = temps.make();
  const child = await spawnBroker(writeBrokerConfig(dir, {}));
  children.push(child);
  const mq = await cleanup.client(child);
  await sendAll(mq, "jobs/v1/1", [0, 1, 2]);
  const held: Received[] = [];
  await mq.consume("jobs/v1/1", recorder(held, { ack: false })).ready;
  await waitFor(() => held.length === 1);
  await kill9(child); // no commit interval waited for: confirmed means on disk
  await mq.disconnect();

  const again = cleanup.broker({ dataDirectory: join(dir, "data") });
  const got: Received[] = [];
  const consumer = await cleanup.client(again);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await waitFor(() => got.length >= 3);
  expect(numbers(got)).toEqual([0, 1, 2]);
  expect(got[0]!.info.messageId).toBe(held[0]!.info.messageId);
});
