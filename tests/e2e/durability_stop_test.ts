/**
 * Durability end to end across stops: soft-stop of a broker process (SIGUSR1) and in process, and a
 * bounded kill -9 crash test (scripts/crash.ts is the long one).
 */
import { expect, it } from "bun:test";
import { join } from "node:path";
import { Client } from "../../mod.ts";
import {
  clientOptions,
  type Received,
  drain,
  recorder,
  sleep,
  waitFor,
} from "../helpers/broker.ts";
import { runCrashTest, spawnBroker, writeBrokerConfig } from "../helpers/crash.ts";
import { durabilityFixture, live, numbers, sendAll } from "../helpers/durability.ts";

const { cleanup, temps, children, inProcess } = durabilityFixture();

// ── soft-stop ──────────────────────────────────────────────────────────────────────────────────

it("durability: SIGUSR1 refuses sends (the client keeps them) and connections, waits for the in-flight delivery, exits 0, loses nothing", async () => {
  const dir = temps.make();
  const child = await spawnBroker(writeBrokerConfig(dir, {}));
  children.push(child);
  const sender = await cleanup.client(child);
  const consumer = await cleanup.client(child);
  await sender.send("jobs/v1/1", { n: 0 });
  await sendAll(sender, "jobs/v1/2", [1, 2, 3, 4]);
  const held: Received[] = [];
  await consumer.consume("jobs/v1/1", recorder(held, { ack: false })).ready;
  await waitFor(() => held.length === 1);

  child.proc.kill("SIGUSR1");
  await waitFor(() => child.output().includes("soft stop"), 2000);
  // Refused with STOPPING by the broker, kept by the client for the next broker it reaches.
  const kept = sender.send("jobs/v1/2", { n: 99 }).then(() => "confirmed", (error) => error.code);
  // The windows below are the subject: a send, a connection and an exit that do not happen have
  // no event to wait for.
  expect(await Promise.race([kept, sleep(200).then(() => "pending")])).toBe("pending");

  // A new client is not let in (it keeps retrying).
  const late = new Client();
  late.on("error", () => {});
  cleanup.add(late);
  const connected = late.connect(clientOptions(child)).then(() => true, () => false);
  expect(await Promise.race([connected, sleep(300).then(() => "pending")])).not.toBe(true);

  // The broker waits for the in-flight delivery…
  let exited = false;
  child.exited.then(() => (exited = true));
  await sleep(200);
  expect(exited).toBe(false);
  // …and exits 0 soon after it is acked.
  const acked = performance.now();
  held[0]!.done();
  expect(await Promise.race([child.exited, sleep(10_000).then(() => "timeout")])).toBe(0);
  expect(performance.now() - acked).toBeLessThan(10_000); // well before the 30 s grace
  await sender.disconnect();
  expect(await kept).toBe("CLOSED"); // disconnected before any broker took it
  await consumer.disconnect();
  await late.disconnect();

  const again = cleanup.broker({ dataDirectory: join(dir, "data") });
  const got: Received[] = [];
  const reader = await cleanup.client(again);
  await reader.consume("jobs/v1/*", recorder(got)).ready;
  await waitFor(() => got.length >= 4);
  await drain(reader, "jobs/v1/1", got);
  expect(numbers(got)).toEqual([1, 2, 3, 4]); // 0 was acked, 99 never stored
});

it("durability: soft-stop past its grace stops anyway, and the unacked delivery survives", async () => {
  const data = temps.make();
  const broker = inProcess({ dataDirectory: data });
  const server = broker.server;
  const mq = await cleanup.client(broker);
  await mq.send("jobs/v1/1", { n: 7 });
  const held: Received[] = [];
  await mq.consume("jobs/v1/1", recorder(held, { ack: false })).ready;
  await waitFor(() => held.length === 1);
  const started = performance.now();
  await server.softStop(200);
  const elapsed = performance.now() - started;
  expect(elapsed).toBeGreaterThanOrEqual(150); // not before the grace
  expect(elapsed).toBeLessThan(10_000); // and it does stop
  await mq.disconnect();

  const again = cleanup.broker({ dataDirectory: data });
  const got: Received[] = [];
  const consumer = await cleanup.client(again);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === 1);
  expect(got[0]!.message).toEqual({ n: 7 });
});

it("durability: soft-stop lets in-flight deliveries finish but starts no new ones", async () => {
  const data = temps.make();
  const broker = inProcess({ dataDirectory: data });
  const mq = await cleanup.client(broker);
  await sendAll(mq, "jobs/v1/1", [0, 1, 2, 3, 4]);
  const got: Received[] = [];
  await mq.consume("jobs/v1/1", recorder(got, { ack: false })).ready; // prefetch 1
  await waitFor(() => got.length === 1);
  const started = performance.now();
  const stopped = broker.server.softStop(30_000);
  got[0]!.done();
  await stopped;
  // The ack freed the only in-flight slot: the broker should stop at once, not hand out message 1
  // and wait for it until the grace runs out.
  expect(numbers(got)).toEqual([0]);
  expect(performance.now() - started).toBeLessThan(10_000); // far from the 30 s grace
  await mq.disconnect();

  const again = cleanup.broker({ dataDirectory: data });
  expect(live(again, "jobs/v1")).toBe(4);
});

// ── kill -9 crash test (bounded; scripts/crash.ts is the long one) ─────────────────────────────

it("durability: kill -9 at random moments while publishing with confirms (3 cycles) loses no confirmed message", async () => {
  const seed = Number(process.env.CRASH_SEED ?? 5);
  const result = await runCrashTest({ cycles: 3, seed, minRunMs: 150, maxRunMs: 500 });
  console.log(
    `crash test (seed ${seed}): kill-9 cycles: ${result.cycles}, confirmed: ${result.confirmed}, ` +
      `lost: ${result.lost}, duplicates: ${result.duplicates}`,
  );
  expect(result.lostSample).toEqual([]);
  expect(result.lost).toBe(0);
  expect(result.confirmed).toBeGreaterThan(0);
  expect(result.rejected).toBe(0);
  // The client replays unconfirmed sends: in the end every send is confirmed.
  expect(result.confirmed).toBe(result.sent);
  expect(result.unconfirmedDelivered).toBe(0);
}, 20_000);

it("durability: kill -9 while a consumer acks (3 cycles) and a backlog waits: every confirmed message arrives, lost acks only duplicate", async () => {
  const seed = Number(process.env.CRASH_SEED ?? 11);
  const result = await runCrashTest({ cycles: 3, seed, minRunMs: 150, maxRunMs: 400, liveConsumer: true, backlog: 2_000 });
  console.log(
    `crash test with a live consumer (seed ${seed}): kill-9 cycles: ${result.cycles}, confirmed: ${result.confirmed}, ` +
      `lost: ${result.lost}, duplicates: ${result.duplicates}`,
  );
  expect(result.lostSample).toEqual([]);
  expect(result.lost).toBe(0);
  expect(result.confirmed).toBeGreaterThan(0);
  expect(result.confirmed).toBe(result.sent);
  expect(result.unconfirmedDelivered).toBe(0);
  // A queue nobody consumed until the end kept every message through the kills.
  expect(result.backlog).toEqual({ confirmed: 2_000, lost: 0 });
  expect(result.restartMs.length).toBe(3);
}, 20_000);

it("durability: kill -9 while a consumer nacks with a delay (3 cycles): the delays outlive the kills, and nothing is lost", async () => {
  const seed = Number(process.env.CRASH_SEED ?? 17);
  // Kills every 150–400 ms against 1.5 s delays: most delayed messages live through a kill.
  const result = await runCrashTest({ cycles: 3, seed, minRunMs: 150, maxRunMs: 400, liveConsumer: true, nackDelayMs: 1_500 });
  console.log(`crash test with delayed nacks (seed ${seed}): nacked ${result.delays.nacked}, early ${result.delays.early}, lost ${result.lost}`);
  expect(result.lost).toBe(0);
  expect(result.confirmed).toBe(result.sent);
  expect(result.delays.nacked).toBeGreaterThan(100);
  // Only a nack on its way, or noted in the last few ms, when the broker died comes back early
  // (measured: 160 of 23,020 over 10 cycles); every one would without a stored delay.
  expect(result.delays.early).toBeLessThan(result.delays.nacked / 10);
}, 20_000);
