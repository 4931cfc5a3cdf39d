/**
 * Scenario (s) of `npm run bench`, scale-out: for each group count N (1, 2, 4 by default), at full
 * speed and then paced at the same rate per group, each run with N fresh brokers (one per group,
 * `cluster.group` "g<i>") on one etcd the scenario starts, the same queues pinned evenly over them,
 * and the same publishers and consumers (src/bench/scale_out.ts). Clients are given g1's broker as
 * their seed and follow the queue map.
 *
 * Per run the brokers are new and so is etcd's prefix (a map of its own; etcd itself lives for the
 * scenario); every broker is master of its group and the map lists every queue and every group
 * before the first client starts. CPU is sampled from /proc through the run, so that the figures
 * can leave out the warm-up (src/bench/sampler.ts).
 */
import { join } from "node:path";
import type { BenchBroker } from "../../src/bench/broker.ts";
import { type BenchEtcd, countKeys, etcdBinary, startBenchEtcd, stopBenchEtcd } from "../../src/bench/etcd.ts";
import { type Child, cpuTotal } from "../../src/bench/processes.ts";
import { fmt, ms, WARMUP_SHARE } from "../../src/bench/results.ts";
import { type RunOutcome, runPlan } from "../../src/bench/run.ts";
import { CpuSampler } from "../../src/bench/sampler.ts";
import {
  groupBrokerConfig,
  type Load,
  perPublisher,
  projection,
  type Projection,
  queuesPerPublisher,
  scaleOutPlan,
  type ScaleOutRun,
  type ScaleOutSettings,
} from "../../src/bench/scale_out.ts";
import { live, tempDirs } from "./processes.ts";
import { median } from "./report.ts";
import { bunClient, spawnClient, startBroker, stopBroker } from "./run.ts";

export interface Measured {
  runs: ScaleOutRun[];
  failedRuns: string[];
  median: ScaleOutRun | null;
}

export interface ScaleOutResult {
  settings: ScaleOutSettings & { queues: number; queuesPerGroup: number[] };
  /** Per group count: full speed and paced (null: no paced runs), and the projection from their medians. */
  groups: { groups: number; full: Measured; paced: Measured | null; projection: Projection | null }[];
  /** The group count the projection's ratios are taken against (the smallest). */
  baseline: number;
}

const READY_TIMEOUT_MS = 20_000;

/**
 * The scenario as `npm run bench` prints it: title, one row per run and the medians, the
 * projection, a verdict line. Without etcd on PATH it is skipped, unless `asked` (--only).
 */
export async function scaleOutScenario(
  s: ScaleOutSettings,
  options: { runs: number; timeoutMs: number; asked: boolean },
): Promise<{ failures: number; verdict: string; result: ScaleOutResult | null }> {
  const queues = s.publishers * queuesPerPublisher(s.groups);
  console.log(
    `(s) scale-out: ${s.groups.join(", ")} groups (one broker each, one etcd), ${s.publishers} publishers with confirms → ` +
      `${s.publishers} consumers acking, ${s.durability} mode; ${queues} queues pinned evenly over the groups; ` +
      `clients given g1's broker as their seed follow the queue map\n` +
      `  full: ${fmt(s.count)} messages per run over the publishers (the first ${WARMUP_SHARE * 100}% of each warm-up), ` +
      `window ${s.window}` +
      (s.ratePerGroup === null ? "" : `; paced: ${fmt(s.ratePerGroup)} msg/s per group (N × that in all), ` +
        `${s.pacedWarmupSeconds} s of warm-up then ${s.pacedSeconds} s measured`) +
      `\n  CPU after the warm-up (sampled from /proc), per message consumed; "whole run" includes the warm-up (JIT compilation of every process)`,
  );
  if (etcdBinary() === null && !options.asked) {
    console.log("  skipped: no etcd on PATH (apt-get install -y etcd-server); --only s makes it an error\n");
    return { failures: 0, verdict: "s: skipped (no etcd on PATH)", result: null };
  }
  try {
    console.log(row(null));
    const result = await runScaleOut(s, { ...options, print: (line) => console.log(line) });
    for (const line of projectionLines(result)) console.log(`  ${line}`);
    const failed = result.groups.reduce((sum, g) => sum + g.full.failedRuns.length + (g.paced?.failedRuns.length ?? 0), 0);
    const figures = result.groups.filter((g) => g.full.median).map((g) =>
      `${g.groups}: ${fmt(g.full.median!.confirmedPerSecond)} msg/s, broker ${g.full.median!.brokerUs.toFixed(1)} µs/msg` +
      (g.paced?.median ? ` (paced ${g.paced.median.brokerUs.toFixed(1)})` : "")
    );
    const verdict = `s: no target: ${failed > 0 ? `${failed} run(s) failed; ` : ""}reported (${figures.join("; ")})`;
    console.log(`  ${verdict}\n`);
    return { failures: failed, verdict, result };
  } catch (error) {
    console.log(`  FAILED: ${(error as Error).message}\n`);
    return { failures: 1, verdict: `s: MISS (failed: ${(error as Error).message})`, result: null };
  }
}

export async function runScaleOut(
  settings: ScaleOutSettings,
  options: { runs: number; timeoutMs: number; print(line: string): void },
): Promise<ScaleOutResult> {
  const queues = settings.publishers * queuesPerPublisher(settings.groups);
  const result: ScaleOutResult = {
    settings: { ...settings, queues, queuesPerGroup: settings.groups.map((n) => queues / n) },
    groups: [],
    baseline: Math.min(...settings.groups),
  };
  const etcd = await startBenchEtcd({ env: process.env, live, tempDirs });
  try {
    for (const groups of settings.groups) {
      const measure = async (load: Load): Promise<Measured> => {
        const measured: Measured = { runs: [], failedRuns: [], median: null };
        for (let run = 1; run <= options.runs; run++) {
          try {
            const figures = await runOnce(settings, groups, load, run, etcd, options.timeoutMs);
            measured.runs.push(figures);
            options.print(row(figures, String(run)));
          } catch (error) {
            measured.failedRuns.push((error as Error).message);
            options.print(`  ${String(groups).padEnd(6)}  ${load.padEnd(6)}  ${String(run).padEnd(6)}  FAILED: ${(error as Error).message}`);
          }
        }
        measured.median = measured.runs.length > 0 ? medianRun(measured.runs) : null;
        if (measured.median) options.print(row(measured.median, "median"));
        return measured;
      };
      const full = await measure("full");
      const paced = settings.ratePerGroup === null ? null : await measure("paced");
      result.groups.push({ groups, full, paced, projection: null });
    }
  } finally {
    await stopBenchEtcd(etcd, tempDirs);
  }
  const input = (g: ScaleOutResult["groups"][number]) =>
    g.full.median ? { groups: g.groups, full: g.full.median, paced: g.paced?.median ?? null } : null;
  const baseline = result.groups.find((g) => g.groups === result.baseline);
  const base = baseline ? input(baseline) : null;
  for (const entry of result.groups) {
    const point = input(entry);
    if (point && base) entry.projection = projection(point, base);
  }
  return result;
}

async function runOnce(
  settings: ScaleOutSettings,
  groups: number,
  load: Load,
  run: number,
  etcd: BenchEtcd,
  timeoutMs: number,
): Promise<ScaleOutRun> {
  // A new prefix per run: a map of its own, as a new deployment.
  const prefix = `kitten-mq-bench/${groups}g-${load}-${run}-${Date.now().toString(36)}/`;
  const started = await Promise.allSettled(
    Array.from({ length: groups }, (_, i) => startBroker(groupBrokerConfig(i, groups, settings, { endpoint: etcd.endpoint, prefix }))),
  );
  const brokers = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  try {
    const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
    if (failed) throw failed.reason;
    await ready(brokers, etcd, prefix, settings.publishers * queuesPerPublisher(settings.groups));
    const seed = brokers[0]!;
    const clients: Child[] = [];
    const sampler = new CpuSampler(() => [etcd.child.pid, ...brokers.map((b) => b.child.pid), ...clients.map((c) => c.pid)]);
    sampler.start();
    let outcome: RunOutcome;
    try {
      outcome = await runPlan(scaleOutPlan(settings, groups, load, String(run)), {
        hosts: [`127.0.0.1:${seed.port}@${seed.serviceId}`],
        keysDirectory: join(seed.dir, "keys"),
        spawn: (role, options) => {
          const child = spawnClient(bunClient(), role, options);
          clients.push(child);
          return child;
        },
        brokers,
        timeoutMs,
      });
    } finally {
      await sampler.stop();
    }
    return figures(settings, groups, load, outcome, { sampler, etcd, brokers, clients });
  } finally {
    await Promise.all(brokers.map(stopBroker));
  }
}

/** One run's figures from the workers' reports and the CPU samples. */
function figures(
  settings: ScaleOutSettings,
  groups: number,
  load: Load,
  outcome: RunOutcome,
  processes: { sampler: CpuSampler; etcd: BenchEtcd; brokers: BenchBroker[]; clients: Child[] },
): ScaleOutRun {
  const { sampler, etcd, brokers, clients } = processes;
  const { summary, published, received } = outcome;
  const { count, warmup } = perPublisher(settings, groups, load);
  // The window after the warm-up: from the first send after it to the last delivery.
  const from = published.warmAt;
  const to = Math.max(...received.map((r) => r.lastAt));
  const measured = received.reduce((sum, r) => sum + r.measured, 0);
  const cpuOf = (children: { pid: number }[]) => children.reduce((sum, c) => sum + sampler.between(c.pid, from, to), 0);
  const steady = (cpuSeconds: number) => Math.round((cpuSeconds / measured) * 1e7) / 10;
  const whole = (cpuSeconds: number) => Math.round((cpuSeconds / summary.deliveries) * 1e7) / 10;
  const publishers = clients.filter((c) => c.name.startsWith("publisher") || c.name.startsWith("rate"));
  const consumers = clients.filter((c) => c.name.startsWith("consumer"));
  return {
    groups,
    load,
    sent: published.sent,
    confirmed: published.confirmed,
    received: summary.deliveries,
    duplicates: summary.duplicates,
    confirmedPerSecond: Math.round((settings.publishers * (count - warmup)) / ((published.lastConfirmAt - published.warmAt) / 1000)),
    confirmedPerSecondWholeRun: summary.confirmRate,
    consumedPerSecond: summary.rate,
    brokerUs: steady(cpuOf(brokers.map((b) => b.child))),
    clientUs: steady(cpuOf(clients)),
    publisherUs: steady(cpuOf(publishers)),
    consumerUs: steady(cpuOf(consumers)),
    brokerUsWholeRun: whole(cpuTotal(summary.cpu.broker)),
    clientUsWholeRun: whole(cpuTotal(summary.cpu.publisher) + cpuTotal(summary.cpu.receivers)),
    brokerCores: brokers.map((b) => Math.round((sampler.between(b.child.pid, from, to) / ((to - from) / 1000)) * 100) / 100),
    // From the first reading (before the first client) to the last: the whole run.
    etcdMs: Math.round(sampler.between(etcd.child.pid, 0, Infinity) * 1000),
    p99: summary.p99,
    confirmP99: summary.confirmP99,
    elapsedS: summary.elapsedS,
    otherCores: summary.otherCores,
  };
}

/**
 * Every broker is master of its group (its log says so) and etcd lists every queue's owner and
 * every group's broker: clients asking the map from the first message find every group.
 */
async function ready(brokers: BenchBroker[], etcd: BenchEtcd, prefix: string, queues: number): Promise<void> {
  const deadline = performance.now() + READY_TIMEOUT_MS;
  const elected = (b: BenchBroker) => b.child.lines.some((line) => line.includes("elected master through etcd;"));
  for (;;) {
    const placed = brokers.every(elected) && (await countKeys(etcd.endpoint, `${prefix}queues/`)) === queues;
    const listed = placed && (await Promise.all(brokers.map((_, i) => countKeys(etcd.endpoint, `${prefix}groups/g${i + 1}/members/`))))
      .every((n) => n >= 1);
    if (listed) return;
    if (performance.now() > deadline) {
      const waiting = brokers.filter((b) => !elected(b)).map((b) => b.serviceId);
      throw new Error(
        `the groups were not ready within ${READY_TIMEOUT_MS / 1000} s (${waiting.length > 0 ? `not master yet: ${waiting.join(", ")}` : "map incomplete"})`,
      );
    }
    await Bun.sleep(20);
  }
}

function medianRun(runs: ScaleOutRun[]): ScaleOutRun {
  const m = (pick: (r: ScaleOutRun) => number) => median(runs.map(pick));
  const round1 = (value: number) => Math.round(value * 10) / 10;
  return {
    groups: runs[0]!.groups,
    load: runs[0]!.load,
    sent: m((r) => r.sent),
    confirmed: m((r) => r.confirmed),
    received: m((r) => r.received),
    duplicates: m((r) => r.duplicates),
    confirmedPerSecond: Math.round(m((r) => r.confirmedPerSecond)),
    confirmedPerSecondWholeRun: Math.round(m((r) => r.confirmedPerSecondWholeRun)),
    consumedPerSecond: Math.round(m((r) => r.consumedPerSecond)),
    brokerUs: round1(m((r) => r.brokerUs)),
    clientUs: round1(m((r) => r.clientUs)),
    publisherUs: round1(m((r) => r.publisherUs)),
    consumerUs: round1(m((r) => r.consumerUs)),
    brokerUsWholeRun: round1(m((r) => r.brokerUsWholeRun)),
    clientUsWholeRun: round1(m((r) => r.clientUsWholeRun)),
    brokerCores: runs[0]!.brokerCores.map((_, i) => Math.round(m((r) => r.brokerCores[i]!) * 100) / 100),
    etcdMs: Math.round(m((r) => r.etcdMs)),
    p99: m((r) => r.p99),
    confirmP99: runs.every((r) => r.confirmP99 !== null) ? m((r) => r.confirmP99!) : null,
    elapsedS: m((r) => r.elapsedS),
    otherCores: m((r) => r.otherCores),
  };
}

const COLUMNS = [
  ["groups", 6, "left"],
  ["load", 6, "left"],
  ["run", 6, "left"],
  ["confirmed/s", 11],
  ["consumed/s", 10],
  ["broker µs/msg", 13],
  ["client µs/msg", 13],
  ["whole run: broker/client", 24],
  ["each broker, cores", 18],
  ["etcd ms", 7],
  ["p99 ms", 6],
  ["confirm p99", 11],
  ["others", 6],
  ["dup", 3],
] as const;

/** One line of the table; `r` null: the header. */
function row(r: ScaleOutRun | null, run = ""): string {
  const cells = r === null ? COLUMNS.map(([name]) => name) : [
    String(r.groups),
    r.load,
    run,
    fmt(r.confirmedPerSecond),
    fmt(r.consumedPerSecond),
    r.brokerUs.toFixed(1),
    r.clientUs.toFixed(1),
    `${r.brokerUsWholeRun.toFixed(1)} / ${r.clientUsWholeRun.toFixed(1)}`,
    r.brokerCores.map((c) => c.toFixed(2)).join(" "),
    String(r.etcdMs),
    ms(r.p99),
    r.confirmP99 === null ? "" : ms(r.confirmP99),
    r.otherCores.toFixed(2),
    String(r.duplicates),
  ];
  return "  " + cells.map((cell, i) => (COLUMNS[i]!.length > 2 ? cell.padEnd(COLUMNS[i]![1]) : cell.padStart(COLUMNS[i]![1]))).join("  ").trimEnd();
}

/** What the scenario prints after its table: per group count, the figures that matter and the projection. */
export function projectionLines(result: ScaleOutResult): string[] {
  const b = result.baseline;
  const named = (n: number) => `${n} group${n > 1 ? "s" : ""}`;
  const lines = [`per group count (medians; ratios against ${named(b)}):`];
  for (const { groups, full, paced, projection: p } of result.groups) {
    const m = full.median;
    if (!m || !p) {
      lines.push(`  ${named(groups)}: no successful run at full speed`);
      continue;
    }
    const pacedNote = paced?.median
      ? `; paced (${fmt(paced.median.confirmedPerSecond)} msg/s in all) ${paced.median.brokerUs.toFixed(1)} µs/msg` +
        (p.pacedVersusBaseline === null ? "" : ` (${p.pacedVersusBaseline.toFixed(2)}×)`)
      : "";
    lines.push(
      `  ${named(groups)}: ${fmt(m.confirmedPerSecond)} confirmed msg/s; broker CPU per message at full speed ` +
        `${m.brokerUs.toFixed(1)} µs (${p.fullVersusBaseline.toFixed(2)}×)${pacedNote}; clients ${m.clientUs.toFixed(1)} µs/msg`,
    );
    lines.push(
      `    projected on a host with enough cores: ${fmt(p.estimate)} msg/s (${groups} × 1 / the broker µs per message of ${named(b)} ` +
        `at full speed); ${fmt(p.conservative)} msg/s with the ${m.brokerUs.toFixed(1)} µs of ${named(groups)} (each broker here ran ` +
        `on ${(m.brokerCores.reduce((x, y) => x + y, 0) / groups).toFixed(2)} core); ${p.coresWithClients} cores with the clients on the same host`,
    );
  }
  lines.push(
    "  projection: each broker on a core of its own, kept busy (a ceiling, not an operating point); not measured: what the brokers " +
      "share beyond cores (memory bandwidth, the NIC or loopback, the disk in fsync mode; etcd is off the message path). " +
      `Here every process shares ${navigator.hardwareConcurrency} cores, so the confirmed rate cannot grow with N (docs/benchmarks.md, "Scale-out: groups")`,
  );
  return lines;
}
