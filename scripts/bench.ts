/**
 * `npm run bench`: throughput and publish→deliver latency of Kitten-MQ on loopback.
 *
 *   bun scripts/bench.ts [--quick] [--runs N] [--only a,b,c] [--timeout S] [--json FILE] [--profile DIR]
 *                        [--window N] [--size BYTES] [--backlog-count N] [--groups 1,2,4] [--groups-durability memory|fsync] [--groups-rate MSG/S]
 *
 * Every run starts a fresh broker subprocess (`bun src/cli/main.ts start --config <tmp>`, port 0)
 * and separate client processes (`scripts/bench_client.ts`: the bench worker of src/bench/worker/,
 * which `kitten-mq bench` runs too), so the CPU of the clients competes with the broker's exactly
 * as it does in real life on the same machine.
 *
 *   (a) work queue  1 publisher with confirms (window of unconfirmed sends) → 1 consumer acking
 *   (a-node)        (a) with the publisher and the consumer on Node, using the npm package's build
 *                   of the client (the broker stays the same); shown as % of (a)
 *   (b) fan-out     1 publisher → 4 listening clients (4 processes, 4 clientIds)
 *   (c) fixed rate  1 publisher at 5,000 msg/s, 10 s of warm-up then 10 s measured → 1 consumer acking (latency);
 *                   before each run, the machine's floor: the same at the same rate through a bare TCP
 *                   relay (scripts/bench/floor.ts), so that (c)'s p99 can be told apart from the machine's
 *   (d) format      (a) on a channel whose format the broker checks
 *   (e) durable     (a) in fsync mode
 *   (f) 2 brokers   (a) with a master and a slave (memory mode like (a)); both clients are given
 *                   both hosts, send to both and mirror their acks to the slave; shown as % of (a)
 *   (f2) replicated (f) with both brokers in fsync mode, replicating over their peer link, and
 *                   cluster.minInSyncReplicas 2: confirmed = on disk on both
 *   (f3) 3 brokers  (f2) with two slaves: the cluster docs/cluster.md recommends
 *   (c3) replicated (c) on the cluster of (f3) at 1,000 msg/s, 50 s of warm-up (as many messages as
 *                   (c)'s) then 10 s measured: send → confirm latency
 *   (s) scale-out   1, 2 and 4 groups (--groups), one broker each, on one etcd the scenario starts;
 *                   8 queues pinned evenly over the groups, 2 publishers → 2 consumers; at full speed
 *                   (window as (a)), then paced at 10,000 msg/s per group (--groups-rate; 0: not);
 *                   confirmed msg/s, broker and client CPU per message, and a projection for a host
 *                   with a core per broker (scripts/bench/scale_out.ts); skipped when no etcd is on
 *                   PATH unless --only names it
 *   (g) backlog     fill 20,000,000 messages (--backlog-count; 200,000 with --quick) into one fsync
 *                   queue with no consumer, kill -9, restart, drain with one consumer (prefetch
 *                   1000); the data directory's size after the drain (disk given back) and the
 *                   longest confirmation of a 100 msg/s probe meanwhile; run once (scripts/bench/backlog.ts)
 *
 * Figures are taken at steady state: the first 25% of the messages of (a), (b), (d)–(f) and the
 * first 50,000 messages of (c) and (c3) (10 s and 50 s) are warm-up (JIT compilation), left out
 * of the rate and the latency; the note column also shows the rate (and the p99) over the whole run.
 *
 * Each scenario runs 3 times (1 with --quick); the table shows every run and the median of each
 * column. A run that exceeds its timeout is killed (broker and clients) and reported as failed.
 * `--profile DIR` runs every process with `bun --cpu-prof-md` and leaves the profiles in DIR.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { encode } from "../src/protocol/cbor.ts";
import { payload } from "../src/bench/worker/mod.ts";
import { type FloorResult, pacingWarning, runFloor } from "./bench/floor.ts";
import { BROKER_ENV, CHILD_ENV, cleanup, ROOT } from "./bench/processes.ts";
import { cpuLine, fmt, median, medianOf, ms, row, table } from "./bench/report.ts";
import { type Median, type RunResult, WARMUP_SHARE, warmupOf } from "../src/bench/results.ts";
import { BUN_FLAGS, type Plan, runOnce } from "./bench/run.ts";
import { backlogVerdicts, runBacklog } from "./bench/backlog.ts";
import { scaleOutScenario } from "./bench/scale_out.ts";
import {
  args,
  BACKLOG_COUNT,
  BODY,
  LISTENERS,
  ONLY,
  PAD,
  PREFETCH,
  QUICK,
  REPLICATED_RATE,
  RUNS,
  SCALE_OUT,
  SIZES,
  TIMEOUT_MS,
  WINDOW,
} from "./bench/options.ts";

/** Medians measured so far, by scenario: (d) is judged against (a). */
const MEDIAN_RATES: Partial<Record<string, number>> = {};
/** Extra `bun` flags for every process: CPU profiles (markdown) written on exit into one folder. */
if (args.profile) BUN_FLAGS.push("--cpu-prof-md", `--cpu-prof-dir=${resolve(args.profile)}`);

/** `node --version` of the Node that runs the (a-node) clients. */
function nodeVersion(): string {
  const result = Bun.spawnSync(["node", "--version"], { stdout: "pipe", stderr: "ignore" });
  return result.exitCode === 0 ? result.stdout.toString().trim() : "(not found)";
}

// ── scenarios ──────────────────────────────────────────────────────────────────────────────────

interface Scenario {
  key: "a" | "a-node" | "b" | "c" | "c3" | "d" | "e" | "f" | "f2" | "f3";
  title: string;
  detail: string;
  unit: string;
  plan(run: number): Plan;
  /** The bar to meet; null for a scenario that is only reported (its line says so, not PASS). */
  target: { label: string; check(median: Median): boolean; against?: "a" | "e" } | null;
  /** Also show the median as a percentage of (a)'s, in the verdict line. */
  versusA?: boolean;
  /** Measure the machine's latency floor (scripts/bench/floor.ts) before each run, at this rate. */
  floor?: { rate: number; seconds: number };
}


/** 1 publisher with confirms (window of unconfirmed sends) → 1 consumer acking, on `channel`; bodies padded by `--size`. */
function workQueuePlan(channel: string, run: number, pad: { pad?: number } = PAD): Plan {
  return {
    receivers: [{
      role: "consumer",
      options: { channel, clientId: `bench-consumer-${run}`, count: SIZES.a, skip: warmupOf(SIZES.a), prefetch: PREFETCH },
    }],
    publisher: {
      role: "publisher",
      options: { channel, clientId: `bench-publisher-${run}`, count: SIZES.a, warmup: warmupOf(SIZES.a), window: WINDOW, ...pad },
    },
  };
}

const SCENARIOS: Scenario[] = [
  {
    key: "a",
    title: "(a) work queue: 1 publisher with confirms → 1 consumer acking",
    detail: `${
      fmt(SIZES.a)
    } messages (the first ${fmt(warmupOf(SIZES.a))} warm-up), window ${WINDOW} unconfirmed sends, consume prefetch ${PREFETCH}, done() per message`,
    unit: "msgs/s",
    plan: (run) => workQueuePlan("bench/v1/work", run),
    target: { label: "≥ 100,000 msgs/s", check: (m) => m.rate >= 100_000 },
  },
  {
    key: "a-node",
    title: "(a) on Node: 1 publisher with confirms → 1 consumer acking, both clients on Node",
    detail: `as (a); the two client processes run on Node ${nodeVersion()} with the npm package's client build, the broker on Bun`,
    unit: "msgs/s",
    versusA: true,
    plan: (run) => ({ ...workQueuePlan("bench/v1/work", run), clients: "node" }),
    // No bar of its own: reported next to (a)'s Bun clients.
    target: null,
  },
  {
    key: "e",
    title: "(e) durable work queue: 1 publisher with confirms → 1 consumer acking, fsync mode",
    detail: `${fmt(SIZES.a)} messages as (a) (the first ${fmt(warmupOf(SIZES.a))} warm-up); each confirmation waits for the group commit (fsync) that holds the message`,
    unit: "msgs/s",
    plan: (run) => workQueuePlan("bench-durable/v1/work", run),
    target: { label: "≥ 50,000 msgs/s", check: (m) => m.rate >= 50_000 },
  },
  {
    key: "f",
    title: "(f) work queue with 2 brokers (master + slave): 1 publisher with confirms → 1 consumer acking",
    detail: `as (a), memory mode; both clients are given both hosts: every send goes to both brokers, ` +
      `the master confirms and delivers, every ack is mirrored to the slave`,
    unit: "msgs/s",
    versusA: true,
    plan: (run) => ({ ...workQueuePlan("bench/v1/work", run), slaves: 1 }),
    // No bar of its own: the figure is reported next to (a), as a ratio.
    target: null,
  },
  {
    key: "f2",
    title: "(f2) replicated durable work queue: 2 brokers in fsync mode, minInSyncReplicas 2",
    detail: `as (a); both brokers know each other (cluster.peers) and store in fsync mode; a send is confirmed once ` +
      `the master and the slave have it on disk (the slave's copy comes over its peer link)`,
    unit: "msgs/s",
    plan: (run) => ({ ...workQueuePlan("bench/v1/work", run), slaves: 1, minInSyncReplicas: 2 }),
    target: shareOf("e", 0.75),
  },
  {
    key: "f3",
    title: "(f3) the recommended cluster: 3 brokers in fsync mode, minInSyncReplicas 2",
    detail: `as (f2) with two slaves: a send is confirmed once the master and every in-sync slave have it on disk`,
    unit: "msgs/s",
    plan: (run) => ({ ...workQueuePlan("bench/v1/work", run), slaves: 2, minInSyncReplicas: 2 }),
    target: shareOf("e", 0.6),
  },
  {
    key: "b",
    title: `(b) fan-out: 1 publisher → ${LISTENERS} listening clients`,
    detail: `${
      fmt(SIZES.b)
    } messages (the first ${fmt(warmupOf(SIZES.b))} warm-up) × ${LISTENERS} listeners (4 processes, 4 clientIds), window ${WINDOW}; latency = worst listener`,
    unit: "deliv/s",
    plan: (run) => ({
      receivers: Array.from({ length: LISTENERS }, (_, i) => ({
        role: "listener" as const,
        options: { channel: `bench/v1/fan`, clientId: `bench-listener-${run}-${i}`, count: SIZES.b, skip: warmupOf(SIZES.b) },
      })),
      publisher: {
        role: "publisher",
        options: {
          channel: `bench/v1/fan`,
          clientId: `bench-publisher-${run}`,
          count: SIZES.b,
          warmup: warmupOf(SIZES.b),
          window: WINDOW,
          ...PAD,
        },
      },
    }),
    target: { label: "≥ 200,000 deliveries/s", check: (m) => m.rate >= 200_000 },
  },
  {
    key: "d",
    title: "(d) work queue on a channel with a format (channels[...].map) → 1 consumer acking",
    detail: `${fmt(SIZES.a)} messages as (a) (the first ${fmt(warmupOf(SIZES.a))} warm-up), each decoded and checked against a 7-field map by the broker`,
    unit: "msgs/s",
    plan: (run) => workQueuePlan("bench-format/v1/work", run, {}), // its bodies are the format's, whatever --size says
    target: shareOf("a", 0.5),
  },
  {
    key: "c",
    title: `(c) fixed rate: ${fmt(SIZES.rate)} msg/s, ${SIZES.warmup} s of warm-up then ${SIZES.seconds} s measured → 1 consumer acking`,
    detail: `paced every ~1 ms; the first ${SIZES.warmup} s (${
      fmt(SIZES.rate * SIZES.warmup)
    } msgs) is warm-up, left out of the latency`,
    unit: "msgs/s",
    plan: (run) => ratePlan("bench/v1/rate", SIZES.rate, run),
    target: { label: "p99 ≤ 2 ms", check: (m) => m.p99 <= 2 },
    floor: { rate: SIZES.rate, seconds: SIZES.seconds },
  },
  {
    key: "c3",
    title: `(c3) replicated latency: the cluster of (f3) at ${fmt(REPLICATED_RATE)} msg/s → 1 consumer acking`,
    detail: `paced as (c), the first ${fmt(SIZES.rate * SIZES.warmup)} msgs (${SIZES.rate * SIZES.warmup / REPLICATED_RATE} s) warm-up as in (c); ` +
      `each send is confirmed once the master and every in-sync slave have it on disk: ` +
      `the headline is send → confirm p99 (the p99 column is publish → deliver)`,
    unit: "msgs/s",
    plan: (run) => ({ ...ratePlan("bench/v1/rate3", REPLICATED_RATE, run), slaves: 2, minInSyncReplicas: 2 }),
    target: { label: "confirm p99 ≤ 3 ms", check: (m) => m.confirmP99 !== null && m.confirmP99 <= 3 },
  },
];

/**
 * A publisher at `rate` msg/s → 1 consumer acking: the warm-up holds as many messages as (c)'s
 * (SIZES.rate × SIZES.warmup), whatever the rate, then SIZES.seconds are measured. The JIT tiers
 * code up by how often it ran, not by how long: at 1,000 msg/s, 10 s of warm-up left the brokers'
 * compiler threads busy through the measured seconds (7.6% of the machine in seconds 4–12 of the
 * run, none in seconds 34–42), and their tail was the start-up's.
 */
function ratePlan(channel: string, rate: number, run: number): Plan {
  const skip = Math.round(SIZES.rate * SIZES.warmup);
  const warmupSeconds = skip / rate;
  const count = skip + Math.round(rate * SIZES.seconds);
  return {
    receivers: [{ role: "consumer", options: { channel, clientId: `bench-consumer-${run}`, count, skip, prefetch: PREFETCH } }],
    publisher: {
      role: "rate",
      options: { channel, clientId: `bench-publisher-${run}`, rate, seconds: SIZES.seconds, warmupSeconds },
    },
  };
}

// ── output ─────────────────────────────────────────────────────────────────────────────────────

/** The floor's own warm-up is short: a bare relay has little to compile. */
function measureFloor(floor: { rate: number; seconds: number }): Promise<FloorResult> {
  return runFloor({ ...floor, warmupSeconds: QUICK ? 0.5 : 2 }, TIMEOUT_MS);
}

/** A median rate as a share of (a)'s median (measured earlier in the same run). */
/** A bar set as a share of another scenario's median in the same run (judged only when it ran). */
function shareOf(key: "a" | "e", share: number): NonNullable<Scenario["target"]> {
  return {
    label: `≥ ${share * 100}% of (${key})`,
    against: key,
    check: (m) => MEDIAN_RATES[key] !== undefined && m.rate >= MEDIAN_RATES[key]! * share,
  };
}

function versusA(rate: number): string {
  const a = MEDIAN_RATES.a;
  return a ? `${Math.round((rate / a) * 100)}% of (a)` : "(a) not run";
}

// ── main ───────────────────────────────────────────────────────────────────────────────────────

process.on("SIGINT", () => {
  console.error("\nbench: interrupted; stopping the broker and clients");
  cleanup().finally(() => process.exit(130));
});

async function main(): Promise<number> {
  const bodyBytes = BODY?.bytes ?? encode(payload(SIZES.a - 1)).length;
  const version = (await Bun.file(join(ROOT, "package.json")).json()).version;
  console.log(
    `Kitten-MQ ${version} benchmark: bun ${Bun.version}, ${navigator.hardwareConcurrency} cores, ` +
      `MIMALLOC_PURGE_DELAY=${BROKER_ENV.MIMALLOC_PURGE_DELAY} (brokers) ${CHILD_ENV.MIMALLOC_PURGE_DELAY} (clients), ` +
      `load ${(await readFile("/proc/loadavg", "utf8").catch(() => "?")).split(" ").slice(0, 3).join(" ")}` +
      `${QUICK ? ", --quick" : ""}`,
  );
  console.log(
    `loopback, fresh broker per run, every client its own process; body ≈ ${bodyBytes} bytes of CBOR; ` +
      `${RUNS} run(s) per scenario, median of each column`,
  );
  console.log(
    `rate = msgs (deliveries for b) sent after the warm-up (the first ${WARMUP_SHARE * 100}% for a, b, d–f; ` +
      `the first ${fmt(SIZES.rate * SIZES.warmup)} messages for c and c3), ` +
      `from the first such send to the last delivery; latency = send() call → handler, after the warm-up, ` +
      `one shared wall clock (timeOrigin + now)`,
  );
  console.log(
    `cpu = CPU seconds while messages flowed; others = cores kept busy by processes outside the ` +
      `benchmark (a shared machine: figures are only comparable when it is near 0)\n`,
  );

  const results: Record<string, unknown> = {};
  const verdicts: string[] = [];
  let failures = 0;
  for (const scenario of SCENARIOS) {
    if (!ONLY.has(scenario.key)) continue;
    console.log(`${scenario.title}\n  ${scenario.detail}`);
    const runs: RunResult[] = [];
    const floors: FloorResult[] = [];
    const rows: string[][] = [];
    for (let run = 1; run <= RUNS; run++) {
      try {
        // The floor runs right before its run, so that both see the machine in the same minute.
        const floor = scenario.floor ? await measureFloor(scenario.floor).catch((error: Error) => error) : null;
        const plan = scenario.plan(run);
        // A paced run's own length comes on top of the timeout: (c3) runs 60 s at its rate.
        const { warmupSeconds = 0, seconds = 0 } = plan.publisher.options as { warmupSeconds?: number; seconds?: number };
        const paced = plan.publisher.role === "rate" ? warmupSeconds + seconds : 0;
        const result = await runOnce(plan, TIMEOUT_MS + paced * 1000);
        if (floor instanceof Error) result.note = [result.note, `floor failed: ${floor.message}`].join("; ");
        else if (floor) {
          floors.push(floor);
          // The floor publisher's own pacing, so that "same pacing" can be checked against (c)'s.
          const pacing = `sent at ${floor.achievedRate}/s, ≤${floor.maxBatch}/batch`;
          const warning = pacingWarning(floor, scenario.floor!.rate);
          if (warning) console.warn(`  warning: ${warning}`);
          result.note = [result.note, `floor p99 ${ms(floor.latency.p99)} ms (${pacing})`, warning].filter(Boolean).join("; ");
        }
        runs.push(result);
        rows.push(row(String(run), result));
      } catch (error) {
        failures++;
        rows.push([String(run), "FAILED", "", "", "", "", "", "", "", "", (error as Error).message]);
      }
    }
    const med = runs.length > 0 ? medianOf(runs) : null;
    if (med) MEDIAN_RATES[scenario.key] = med.rate;
    if (med) rows.push(row("median", med));
    console.log(table(rows));
    if (med) console.log(`  ${cpuLine(med)}`);
    const floorP99 = floors.length > 0 ? median(floors.map((f) => f.latency.p99)) : null;
    if (med && floorP99 !== null) {
      // A gap between two p99s, not what Kitten-MQ adds to a message: percentiles do not add up.
      const gap = med.p99 - floorP99;
      console.log(
        `  floor: a bare TCP relay with the same processes, runtime and pacing (no Kitten-MQ) gave p99 ` +
          `${floors.map((f) => ms(f.latency.p99)).join(" / ")} ms, median ${ms(floorP99)} ms: ` +
          `(${scenario.key})'s median p99 is ${ms(Math.abs(gap))} ms ${gap >= 0 ? "above" : "below"} the floor's`,
      );
    }
    const target = scenario.target;
    const pass = med !== null && target !== null && target.check(med);
    const figure = med === null ? "" : ` (median ${
      scenario.key === "c"
        ? `p99 ${ms(med.p99)} ms`
        : scenario.key === "c3"
        ? `confirm p99 ${med.confirmP99 === null ? "not timed" : `${ms(med.confirmP99)} ms`}`
        : `${fmt(med.rate)} ${scenario.unit}`
    }${scenario.versusA ? `, ${versusA(med.rate)}` : ""})`;
    const against = target?.against;
    const unjudged = against !== undefined && MEDIAN_RATES[against] === undefined;
    const share = against !== undefined && !unjudged && med !== null ? `, ${Math.round((med.rate / MEDIAN_RATES[against]!) * 100)}% of (${against})` : "";
    const verdict = med === null
      ? "MISS (no successful run)"
      : target === null
      ? `reported${figure}`
      : unjudged
      ? `not judged: (${against}) not run${figure}`
      : `${pass ? "PASS" : "MISS"}${figure.replace(/\)$/, `${share})`)}`;
    const line = `${scenario.key}: ${target === null ? "no target" : `target ${target.label}`}: ${verdict}`;
    console.log(`  ${line}\n`);
    verdicts.push(line);
    results[scenario.key] = {
      title: scenario.title,
      target: target?.label ?? null,
      pass: target === null ? null : pass,
      ...(scenario.versusA && med && MEDIAN_RATES.a ? { ratioToA: Math.round((med.rate / MEDIAN_RATES.a) * 1000) / 1000 } : {}),
      median: med,
      runs: runs.map(({ note: _, ...r }) => r),
      failedRuns: RUNS - runs.length,
      ...(floorP99 !== null ? { floor: { p99Median: floorP99, runs: floors } } : {}),
    };
  }
  if (ONLY.has("s")) {
    const scale = await scaleOutScenario(SCALE_OUT, { runs: RUNS, timeoutMs: TIMEOUT_MS, asked: args.only !== undefined });
    failures += scale.failures;
    verdicts.push(scale.verdict);
    if (scale.result) results.s = { title: "(s) scale-out", ...scale.result };
  }
  if (ONLY.has("g")) {
    console.log(`(g) backlog: fill ${fmt(BACKLOG_COUNT)} messages (fsync, no consumer), kill -9, restart, drain with 1 consumer (prefetch 1000)`);
    try {
      const backlog = await runBacklog(BACKLOG_COUNT, (line) => console.log(`  ${line}`));
      const checks = backlogVerdicts(backlog);
      for (const check of checks) console.log(`  ${check.pass ? "PASS" : "MISS"} ${check.line}`);
      const missed = checks.filter((check) => !check.pass).length;
      const line = `g: ${missed === 0 ? "PASS" : `MISS (${missed} of ${checks.length})`} (fill ${fmt(backlog.fillRate)} msg/s, ` +
        `drain ${fmt(backlog.drainRate)} msg/s, restart ${backlog.restartMs.toFixed(0)} ms, ` +
        `data directory ${backlog.diskSettledMiB.toFixed(1)} MiB after the drain, lost ${backlog.lost})`;
      console.log(`  ${line}\n`);
      verdicts.push(line);
      results.g = { title: "(g) backlog", pass: missed === 0, ...backlog };
    } catch (error) {
      failures++;
      console.log(`  FAILED: ${(error as Error).message}\n`);
      verdicts.push(`g: MISS (failed: ${(error as Error).message})`);
    }
  }
  console.log(`summary\n  ${verdicts.join("\n  ")}`);

  if (args.json) {
    const out = {
      date: new Date().toISOString(),
      bun: Bun.version,
      cores: navigator.hardwareConcurrency,
      quick: QUICK,
      runsPerScenario: RUNS,
      bodyBytes,
      scenarios: results,
    };
    await writeFile(resolve(args.json), JSON.stringify(out, null, 2) + "\n");
    console.log(`  medians written to ${args.json}`);
  }
  return failures > 0 ? 1 : 0;
}

main().then(
  async (code) => {
    await cleanup();
    process.exit(code);
  },
  async (error) => {
    console.error(`bench: ${(error as Error)?.stack ?? error}`);
    await cleanup();
    process.exit(1);
  },
);
