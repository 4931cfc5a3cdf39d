/**
 * The peer comparison: Kitten-MQ against the peers' modes that keep what they confirm, on this
 * machine, by the same worker code (src/bench/worker/), alternately run by run.
 *
 *   npm run bench:peers                         # both comparisons, 3 runs each, 100,000 messages of 128 bytes
 *   npm run bench:peers -- --only replicated --runs 5 --count 300000 --json peers.json
 *
 * - `replicated`: Kitten-MQ's recommended cluster, three brokers, fsync, `cluster.minInSyncReplicas`
 *   2 (scenario (f3) of `npm run bench`: a send is confirmed once the master and every in-sync
 *   slave hold it on disk), against NATS JetStream R3: three nats-server (Debian's `nats-server`)
 *   in one cluster, a file stream with 3 replicas and work-queue retention (a publish is
 *   acknowledged once a majority of the replicas stored it; JetStream does not fsync each write).
 * - `durable`: one Kitten-MQ broker in fsync mode (scenario (e)) against Redis Streams (Debian's
 *   `redis-server`) with `appendfsync always` (each reply after the AOF is fsynced).
 * - Both: 1 publisher keeping `--window` sends unconfirmed → 1 consumer acking each message
 *   (prefetch, max_ack_pending or COUNT 1000); bodies `{seq, t, pad}` of `--size` bytes of CBOR;
 *   the first 25% is warm-up; rate = messages sent after it, from the first such send to the last
 *   delivery. CPU per message: the servers together, the publisher, the consumer.
 *
 * A comparison whose server is not on PATH is skipped with what to install; exit 1 when a run
 * failed, 2 when nothing could run.
 */
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { Plan as RunPlan } from "../src/bench/run.ts";
import { runPlan } from "../src/bench/run.ts";
import { type RunResult, warmupOf } from "../src/bench/results.ts";
import { bodyFor, DEFAULTS } from "../src/bench/scenarios.ts";
import type { BenchBroker } from "../src/bench/broker.ts";
import { hasNatsServer, hostsOf, natsServerVersion, startJetStream, stopJetStream } from "./bench/jetstream_servers.ts";
import { hasRedisServer, redisServerVersion, startRedis, stopRedis } from "./bench/redis_server.ts";
import { Child, cleanup, ROOT } from "./bench/processes.ts";
import { cpuLine, fmt, median, medianOf, ms, row, table } from "./bench/report.ts";
import { runOnce } from "./bench/run.ts";

const { values: args } = parseArgs({
  options: {
    runs: { type: "string", default: "3" },
    count: { type: "string", default: "100000" },
    window: { type: "string", default: "1000" },
    size: { type: "string", default: "128" },
    only: { type: "string", default: "replicated,durable" },
    json: { type: "string" },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (args.help) {
  console.log("usage: bun scripts/peers.ts [--only replicated,durable] [--runs N] [--count N] [--window N] [--size BYTES] [--json FILE]");
  process.exit(0);
}
const positive = (name: string, text: string) => {
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1) {
    console.error(`--${name} must be a positive integer: current value is "${text}"`);
    process.exit(2);
  }
  return value;
};
const RUNS = positive("runs", args.runs);
const COUNT = positive("count", args.count);
const WINDOW = positive("window", args.window);
const SIZE = positive("size", args.size);
const TIMEOUT_MS = 120_000 + COUNT; // generous: a run that stalls fails, one that is slow does not

process.on("SIGINT", async () => {
  await cleanup();
  process.exit(130);
});

const body = bodyFor(SIZE, COUNT);
const plan = (run: number, channel: string): RunPlan => ({
  receivers: [{
    role: "consumer",
    options: { channel, clientId: `peers-consumer-${run}`, count: COUNT, skip: warmupOf(COUNT), prefetch: DEFAULTS.prefetch },
  }],
  publisher: {
    role: "publisher",
    options: { channel, clientId: `peers-publisher-${run}`, count: COUNT, warmup: warmupOf(COUNT), window: WINDOW, pad: body.pad },
  },
});

interface System {
  title: string;
  run(run: number): Promise<RunResult>;
}
interface Comparison {
  /** What is missing to run it (a server not on PATH), or null. */
  missing: string | null;
  kitten: System;
  peer: System;
}

const peerClient = (peer: string) => (role: string, options: Record<string, unknown>) =>
  new Child(`${role} ${options.clientId}`, [process.execPath, join(ROOT, "scripts", "bench_peer_client.ts"), peer, role, JSON.stringify(options)]);

/** One run of the plan on servers this script started (their CPU is counted), stopped afterwards. */
async function runOnPeer(peer: string, servers: BenchBroker[], hosts: string[], run: number, stop: () => Promise<void>): Promise<RunResult> {
  try {
    const { summary } = await runPlan(plan(run, `bench/v1/peers${run}`), { hosts, keysDirectory: "", spawn: peerClient(peer), brokers: servers, timeoutMs: TIMEOUT_MS });
    return summary;
  } finally {
    await stop();
  }
}

const COMPARISONS: Record<string, Comparison> = {
  replicated: {
    missing: hasNatsServer() ? null : "nats-server is not on PATH (apt-get install nats-server)",
    kitten: {
      title: "Kitten-MQ: 3 brokers, fsync, minInSyncReplicas 2",
      run: (run) => runOnce({ ...plan(run, `bench/v1/peers${run}`), slaves: 2, minInSyncReplicas: 2 }, TIMEOUT_MS),
    },
    peer: {
      title: `NATS JetStream R3: 3 nats-server ${hasNatsServer() ? await natsServerVersion() : ""}, file stream, 3 replicas`,
      run: async (run) => {
        const servers = await startJetStream(3, 3);
        return runOnPeer("jetstream", servers, hostsOf(servers), run, () => stopJetStream(servers));
      },
    },
  },
  durable: {
    missing: hasRedisServer() ? null : "redis-server is not on PATH (apt-get install redis-server)",
    kitten: {
      title: "Kitten-MQ: 1 broker, fsync",
      run: (run) => runOnce(plan(run, `bench-durable/v1/peers${run}`), TIMEOUT_MS),
    },
    peer: {
      title: `Redis Streams: redis-server ${hasRedisServer() ? await redisServerVersion() : ""}, appendfsync always`,
      run: async (run) => {
        const server = await startRedis();
        return runOnPeer("redis", [server], [`127.0.0.1:${server.port}`], run, () => stopRedis(server));
      },
    },
  },
};

const asked = args.only.split(",").map((name) => name.trim());
for (const name of asked) {
  if (!(name in COMPARISONS)) {
    console.error(`--only takes ${Object.keys(COMPARISONS).join(", ")}: unknown "${name}"`);
    process.exit(2);
  }
}
const runnable = asked.filter((name) => {
  const missing = COMPARISONS[name]!.missing;
  if (missing) console.error(`${name}: skipped: ${missing}`);
  return missing === null;
});
if (runnable.length === 0) process.exit(2);

console.log(
  `Kitten-MQ against its peers: ${RUNS} run(s) of each, alternately; ${fmt(COUNT)} messages of ${body.bytes} bytes ` +
    `(the first ${fmt(warmupOf(COUNT))} warm-up), window ${WINDOW}, prefetch ${DEFAULTS.prefetch}; bun ${Bun.version}, ${navigator.hardwareConcurrency} cores`,
);
const report: Record<string, unknown> = { settings: { runs: RUNS, count: COUNT, window: WINDOW, bodyBytes: body.bytes } };
let failures = 0;
for (const name of runnable) {
  const { kitten, peer } = COMPARISONS[name]!;
  const results = new Map<System, RunResult[]>([[kitten, []], [peer, []]]);
  console.log(`\n── ${name}: ${kitten.title} against ${peer.title}`);
  for (let run = 1; run <= RUNS; run++) {
    for (const [system, runs] of results) {
      try {
        runs.push(await system.run(run));
      } catch (error) {
        failures++;
        console.error(`  ${system.title}, run ${run} failed: ${(error as Error).message}`);
      }
    }
  }
  const medians: Record<string, unknown> = {};
  for (const [system, runs] of results) {
    console.log(`\n${system.title}`);
    if (runs.length === 0) continue;
    const med = medianOf(runs);
    const confirm = runs.map((r) => r.confirmP99).filter((p): p is number => p !== null);
    console.log(table([...runs.map((r, i) => row(String(i + 1), r)), row("median", med)]));
    console.log(`  ${cpuLine(med)}${confirm.length > 0 ? `; confirm p99 ${ms(median(confirm))} ms` : ""}`);
    medians[system === kitten ? "kitten" : "peer"] = { title: system.title, median: med, runs };
  }
  const [ours, theirs] = [results.get(kitten)!, results.get(peer)!];
  if (ours.length > 0 && theirs.length > 0) {
    const ratio = medianOf(ours).rate / medianOf(theirs).rate;
    console.log(`\n${name}: Kitten-MQ / ${peer.title.split(":")[0]}, median rates: ${ratio.toFixed(2)}×`);
    medians.ratio = Math.round(ratio * 100) / 100;
  }
  report[name] = medians;
}
if (args.json) await writeFile(args.json, JSON.stringify(report, null, 2));
await cleanup();
process.exit(failures > 0 ? 1 : 0);
