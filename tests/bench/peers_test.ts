/**
 * The peer comparison (scripts/peers.ts) against real servers: Debian's `nats-server` and
 * `redis-server` (.ci/run installs them; these tests fail, not skip, without them), and the bench
 * worker on each peer's client (scripts/bench/jetstream_client.ts, redis_client.ts). Small runs:
 * this checks that the comparison measures what it says (every message confirmed, delivered once,
 * the servers' CPU counted, their folders and processes gone afterwards), not how fast anything is.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { BenchBroker } from "../../src/bench/broker.ts";
import { type RunOutcome, runPlan } from "../../src/bench/run.ts";
import { subjectOf } from "../../scripts/bench/jetstream_client.ts";
import { hasNatsServer, hostsOf, startJetStream, startJetStreamWith, stopJetStream } from "../../scripts/bench/jetstream_servers.ts";
import { streamKey } from "../../scripts/bench/redis_client.ts";
import { hasRedisServer, startRedis, stopRedis } from "../../scripts/bench/redis_server.ts";
import { Child, live, retryOnPortTaken, ROOT, tempDirs } from "../../scripts/bench/processes.ts";

let stop: (() => Promise<void>) | null = null;
afterEach(async () => {
  await stop?.();
  stop = null;
});

/** `count` messages (a quarter of them warm-up) from one publisher to one consumer, on `peer`'s servers. */
function runOn(peer: "jetstream" | "redis", hosts: string[], servers: BenchBroker[], count: number, window: number): Promise<RunOutcome> {
  const channel = `bench/v1/${peer}-test`;
  const warmup = count / 4;
  return runPlan({
    receivers: [{ role: "consumer", options: { channel, clientId: "test-consumer", count, skip: warmup, prefetch: window * 2 } }],
    publisher: { role: "publisher", options: { channel, clientId: "test-publisher", count, warmup, window } },
  }, {
    hosts,
    keysDirectory: "",
    spawn: (role, options) =>
      new Child(`${role} ${options.clientId}`, [process.execPath, join(ROOT, "scripts", "bench_peer_client.ts"), peer, role, JSON.stringify(options)]),
    brokers: servers,
    timeoutMs: 30_000,
  });
}

/** Every message confirmed and delivered once, and the servers' CPU counted in the run's. */
function expectComplete({ summary, published, received }: RunOutcome, count: number): void {
  expect(published.confirmed).toBe(count);
  expect(published.failed).toBe(0);
  expect(received[0]!.received).toBe(count);
  expect(received[0]!.duplicates).toBe(0);
  expect(summary.deliveries).toBe(count);
  expect(summary.rate).toBeGreaterThan(0);
  expect(summary.cpu.broker.user + summary.cpu.broker.system).toBeGreaterThan(0);
}

function expectGone(dirs: string[]): void {
  for (const dir of dirs) {
    expect(existsSync(dir)).toBe(false);
    expect(tempDirs.has(dir)).toBe(false);
  }
  expect(live.size).toBe(0);
}

describe("a server's start", () => {
  test("goes again with new ports when a port was taken meanwhile, at most three times; any other failure at once", async () => {
    let calls = 0;
    const taken = () => new Error("nats-server-1 exited: listen tcp 127.0.0.1:4222: bind: address already in use");
    expect(await retryOnPortTaken(async () => (++calls < 3 ? Promise.reject(taken()) : "up"))).toBe("up");
    expect(calls).toBe(3);
    calls = 0;
    await expect(retryOnPortTaken(async () => (++calls, Promise.reject(taken())))).rejects.toThrow("address already in use");
    expect(calls).toBe(3);
    calls = 0;
    await expect(retryOnPortTaken(async () => (++calls, Promise.reject(new Error("bad option"))))).rejects.toThrow("bad option");
    expect(calls).toBe(1);
  });
});

describe("NATS JetStream", () => {
  test("nats-server is installed", () => {
    expect(hasNatsServer()).toBe(true);
  });

  test("channels become subjects; what a subject cannot hold is refused", () => {
    expect(subjectOf("bench/v1/peers1")).toBe("bench.v1.peers1");
    expect(() => subjectOf("bench/v1/a b")).toThrow('channel "bench/v1/a b" cannot be a subject');
    expect(() => subjectOf("bench/*/x")).toThrow("cannot be a subject");
  });

  test("a run on a three-server cluster confirms and delivers every message once, and counts the servers' CPU", async () => {
    const servers = await startJetStream(3, 3);
    stop = () => stopJetStream(servers);
    expectComplete(await runOn("jetstream", hostsOf(servers), servers, 2000, 100), 2000);
    await stop();
    stop = null;
    expectGone(servers.map((server) => server.dir));
  }, 60_000);

  test("a server that cannot start fails the setup with its own words, and nothing is left running", async () => {
    await expect(startJetStreamWith(1, 1, ["--cluster_name"])).rejects.toThrow("nats-server-0 exited");
    expect(live.size).toBe(0);
  }, 40_000);
});

describe("Redis Streams", () => {
  test("redis-server is installed", () => {
    expect(hasRedisServer()).toBe(true);
  });

  test("each channel is a stream of its own", () => {
    expect(streamKey("bench/v1/peers1")).toBe("kitten-bench:bench/v1/peers1");
    expect(streamKey("bench/v1/peers2")).not.toBe(streamKey("bench/v1/peers1"));
  });

  test("a run confirms and delivers every message once, writes each to the append-only file, and counts the server's CPU", async () => {
    const server = await startRedis();
    stop = () => stopRedis(server);
    expectComplete(await runOn("redis", [`127.0.0.1:${server.port}`], [server], 5000, 200), 5000);
    // appendfsync always: every XADD is in the append-only file (the client sends it lower-case).
    const files = readdirSync(server.dir, { recursive: true }).map(String).filter((name) => name.includes(".aof"));
    const written = files.map((name) => readFileSync(join(server.dir, name)).toString("latin1")).join("").toUpperCase();
    expect(written.split("XADD").length - 1).toBe(5000);
    await stop();
    stop = null;
    expectGone([server.dir]);
  }, 60_000);

  test("a server that cannot start fails with its own words, and nothing is left running", async () => {
    await expect(startRedis(["--no-such-option", "x"])).rejects.toThrow("redis-server exited");
    expect(live.size).toBe(0);
  }, 30_000);
});
