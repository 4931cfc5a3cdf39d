/**
 * Scenario (g), a backlog bigger than memory: fill `count` 100-byte messages into one durable
 * queue (fsync mode) with no consumer, kill -9 the broker, restart it on the same data directory,
 * then drain everything with one consumer (prefetch 1000).
 *
 * Reported: fill rate (confirmed sends per second), the broker's peak RSS (VmHWM, over the fill
 * and, for the restarted process, over the drain), restart-to-listening (spawn to the "listening"
 * line, Bun's own start included), drain rate, RSS right after the drain and how long RSS took to
 * come back within 2× of the idle broker's (at most 60 s), and lost = confirmed - received.
 *
 * Disk given back: the data directory's size (every file in it) at the end of the fill, right
 * after the drain, and once a second after it until it is within BACKLOG_TARGETS.diskMiB (at most 60 s).
 * A probe publisher sends PROBE_RATE msg/s of its own queue (fsync, nobody consumes them: about
 * 200 bytes of store each) from the start of the drain until then; its longest send → confirm,
 * during the drain and after it, is the longest pause a sender saw while the store drained and
 * gave its space back. The store's own slowest commit and slowest reclaim step come from its
 * "store closed" line.
 */
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Child, ROOT, tempDirs, withTimeout } from "./processes.ts";
import { fmt } from "./report.ts";
import type { PublisherResult, ReceiverResult } from "../../src/bench/results.ts";
import { BUN_FLAGS } from "./run.ts";

const BUN = process.execPath;
const CLIENT = join(ROOT, "scripts", "bench_client.ts");
const CHANNEL = "bench-backlog/v1/work";
const PROBE_CHANNEL = "bench-probe/v1/probe";
/** Probe sends per second during the drain and while the disk is given back. */
const PROBE_RATE = 100;
const MIB = 1024 * 1024;

export interface BacklogResult {
  count: number;
  fillRate: number;
  /** Peak RSS of the broker that was filled, and of the restarted one while it drained (MiB). */
  fillPeakMiB: number;
  drainPeakMiB: number;
  idleMiB: number;
  restartMs: number;
  /** RSS of the restarted broker right after it listened (MiB). */
  restartedMiB: number;
  drainRate: number;
  afterDrainMiB: number;
  /** Seconds after the drain until RSS was within 2× idle (null: not within 60 s), and RSS then. */
  settleSeconds: number | null;
  settledMiB: number;
  /** The data directory (MiB): after the fill, right after the drain, and when it was within the target (or 60 s later). */
  diskFilledMiB: number;
  diskAfterDrainMiB: number;
  diskSettledMiB: number;
  /** Seconds after the drain until the data directory was within BACKLOG_TARGETS.diskMiB (null: not within 60 s). */
  diskSettleSeconds: number | null;
  /** The probe's longest send → confirm (ms) during the drain, and after it while the disk was given back. */
  probeMaxConfirmDrainMs: number;
  probeMaxConfirmAfterMs: number;
  /** From the store's "store closed" line: slowest commit and slowest reclaim step (ms), pages given back. */
  maxCommitMs: number | null;
  maxReclaimMs: number | null;
  reclaimedPages: number | null;
  confirmed: number;
  received: number;
  duplicates: number;
  lost: number;
}

/** Targets of the issue, on the 2-core box. */
export const BACKLOG_TARGETS = { peakMiB: 256, restartMs: 2000, drainRate: 150_000, diskMiB: 32, pauseMs: 50 };

/** Bytes of every file in `directory` (not recursive: the store keeps no folders). */
async function directoryMiB(directory: string): Promise<number> {
  let bytes = 0;
  for (const name of await readdir(directory)) bytes += (await stat(join(directory, name))).size;
  return bytes / MIB;
}

async function memory(pid: number): Promise<{ rss: number; hwm: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN) * 1024;
  return { rss: field("VmRSS") / MIB, hwm: field("VmHWM") / MIB };
}

async function spawnBroker(configPath: string): Promise<{ child: Child; port: number; listenMs: number }> {
  const started = performance.now();
  const child = new Child("broker", [BUN, ...BUN_FLAGS, "src/cli/main.ts", "start", "--config", configPath]);
  const line = await withTimeout(child.waitFor("kitten-mq listening on "), 60_000, "broker did not listen within 60 s");
  const listenMs = performance.now() - started;
  const port = Number(/:(\d+)$/.exec(line)?.[1]);
  if (!Number.isInteger(port) || port <= 0) throw new Error(`cannot parse the broker port from "${line}"`);
  return { child, port, listenMs };
}

function client(role: string, options: Record<string, unknown>): Child {
  return new Child(`${role} ${options.clientId}`, [BUN, ...BUN_FLAGS, CLIENT, role, JSON.stringify(options)]);
}

export async function runBacklog(count: number, log: (line: string) => void): Promise<BacklogResult> {
  const dir = await mkdtemp(join(tmpdir(), "kitten-mq-bench-backlog-"));
  tempDirs.add(dir);
  const children: Child[] = [];
  try {
    const configPath = join(dir, "kitten-mq.config.json");
    await writeFile(configPath, JSON.stringify({
      socketServer: { port: 0 },
      isManagementInterface: false,
      logLevel: 2,
      durability: "fsync",
      prefetch: 1000,
      dataDirectory: join(dir, "data"),
    }));
    const keysDirectory = join(dir, "keys");

    // Fill: one publisher, no consumer.
    const first = await spawnBroker(configPath);
    children.push(first.child);
    const idleMiB = (await memory(first.child.pid)).rss;
    log(`fill: ${fmt(count)} messages, broker idle RSS ${idleMiB.toFixed(0)} MiB`);
    const hosts = [`127.0.0.1:${first.port}@broker-1`];
    const publisher = client("publisher", { hosts, keysDirectory, channel: CHANNEL, clientId: "bench-backlog-publisher", count, window: 2000 });
    children.push(publisher);
    const published = await publisher.waitJson<PublisherResult>("result");
    const fillPeakMiB = (await memory(first.child.pid)).hwm;
    const fillRate = published.confirmed / ((published.lastConfirmAt - published.firstAt) / 1000);
    const dataDirectory = join(dir, "data");
    const diskFilledMiB = await directoryMiB(dataDirectory);
    log(`fill: ${fmt(published.confirmed)} confirmed at ${fmt(fillRate)} msg/s, broker peak RSS ${fillPeakMiB.toFixed(0)} MiB, ` +
      `data directory ${diskFilledMiB.toFixed(1)} MiB`);

    // kill -9, restart on the same data directory.
    first.child.proc.kill("SIGKILL");
    await first.child.exited;
    const second = await spawnBroker(configPath);
    children.push(second.child);
    const restartedMiB = (await memory(second.child.pid)).rss;
    log(`restart: listening after ${second.listenMs.toFixed(0)} ms, RSS ${restartedMiB.toFixed(0)} MiB`);

    // Drain: one consumer, prefetch 1000; the probe measures confirmations meanwhile.
    const probe = client("rate", {
      hosts: [`127.0.0.1:${second.port}@broker-1`],
      keysDirectory,
      channel: PROBE_CHANNEL,
      clientId: "bench-backlog-probe",
      rate: PROBE_RATE,
      seconds: 3600, // stopped (SIGTERM) once the disk settled
    });
    children.push(probe);
    await withTimeout(probe.waitFor("ready"), 10_000, "the probe did not connect");
    const consumer = client("consumer", {
      hosts: [`127.0.0.1:${second.port}@broker-1`],
      keysDirectory,
      channel: CHANNEL,
      clientId: "bench-backlog-consumer",
      count: published.confirmed,
      prefetch: 1000,
    });
    children.push(consumer);
    // A lost message would leave the consumer waiting forever: past a generous limit (20,000
    // msg/s at the least) it reports what it received, and the missing ones count as lost.
    const drainLimitMs = Math.max(60_000, (published.confirmed / 20_000) * 1000);
    const received = await withTimeout(consumer.waitJson<ReceiverResult>("result"), drainLimitMs, "drain stalled").catch(async () => {
      consumer.proc.kill("SIGTERM");
      const partial = await withTimeout(consumer.waitJson<ReceiverResult>("partial"), 5000, "the consumer did not report");
      log(`drain: stalled after ${(drainLimitMs / 1000).toFixed(0)} s with ${fmt(partial.received)} of ${fmt(published.confirmed)} received`);
      return partial;
    });
    const drained = await memory(second.child.pid);
    const drainedAt = performance.timeOrigin + performance.now();
    const diskAfterDrainMiB = await directoryMiB(dataDirectory);
    const drainRate = received.received / ((received.lastAt - received.firstAt) / 1000);
    log(`drain: ${fmt(received.received)} at ${fmt(drainRate)} msg/s, RSS after ${drained.rss.toFixed(0)} MiB, peak ${drained.hwm.toFixed(0)} MiB, ` +
      `data directory ${diskAfterDrainMiB.toFixed(1)} MiB`);

    // Memory and disk coming back: sampled every second for at most 60 s.
    let settleSeconds: number | null = null;
    let settledMiB = drained.rss;
    let diskSettleSeconds: number | null = null;
    let diskSettledMiB = diskAfterDrainMiB;
    for (let second_ = 0; second_ <= 60 && (settleSeconds === null || diskSettleSeconds === null); second_++) {
      if (settleSeconds === null) {
        settledMiB = (await memory(second.child.pid)).rss;
        if (settledMiB <= 2 * idleMiB) settleSeconds = second_;
      }
      if (diskSettleSeconds === null) {
        diskSettledMiB = await directoryMiB(dataDirectory);
        if (diskSettledMiB <= BACKLOG_TARGETS.diskMiB) diskSettleSeconds = second_;
      }
      if (settleSeconds === null || diskSettleSeconds === null) await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    log(`disk: data directory ${diskSettledMiB.toFixed(1)} MiB ${diskSettleSeconds === null ? "60 s" : `${diskSettleSeconds} s`} after the drain`);
    probe.proc.kill("SIGTERM");
    const probed = await withTimeout(probe.waitJson<ProbeResult>("partial"), 5000, "the probe did not report");
    const slowest = (during: boolean) =>
      Math.max(0, ...probed.slowConfirms.filter(([sentAt]) => (sentAt < drainedAt) === during).map(([, ms]) => ms));
    const probeMaxConfirmDrainMs = slowest(true);
    const probeMaxConfirmAfterMs = slowest(false);
    log(`probe: ${fmt(probed.confirmed)} sends confirmed at ${PROBE_RATE} msg/s, ${probed.failed} refused; longest confirm ` +
      `${probeMaxConfirmDrainMs.toFixed(1)} ms during the drain, ${probeMaxConfirmAfterMs.toFixed(1)} ms after it (0: none over 20 ms)`);
    await second.child.stop(10_000);
    // The store's own account of the drain: commits, deletes, delivery-count updates, space given back.
    const closed = [...second.child.lines, ...second.child.stderr.split("\n")].find((line) => line.includes("store closed"));
    if (closed) log(`drain: store ${/commits=.*maxReclaimMs=[\d.]+/.exec(closed)?.[0] ?? closed}`);
    const figure = (name: string) => {
      const value = closed ? new RegExp(`${name}=([\\d.]+)`).exec(closed)?.[1] : undefined;
      return value === undefined ? null : Number(value);
    };
    return {
      count,
      fillRate,
      fillPeakMiB,
      drainPeakMiB: drained.hwm,
      idleMiB,
      restartMs: second.listenMs,
      restartedMiB,
      drainRate,
      afterDrainMiB: drained.rss,
      settleSeconds,
      settledMiB,
      diskFilledMiB,
      diskAfterDrainMiB,
      diskSettledMiB,
      diskSettleSeconds,
      probeMaxConfirmDrainMs,
      probeMaxConfirmAfterMs,
      maxCommitMs: figure("maxCommitMs"),
      maxReclaimMs: figure("maxReclaimMs"),
      reclaimedPages: figure("reclaimedPages"),
      confirmed: published.confirmed,
      received: received.received,
      duplicates: received.duplicates,
      lost: published.confirmed - received.received,
    };
  } finally {
    await Promise.all(children.map((child) => child.stop(3000)));
    await rm(dir, { recursive: true, force: true });
    tempDirs.delete(dir);
  }
}

/** The verdict lines of (g), one per target. */
export function backlogVerdicts(r: BacklogResult): { line: string; pass: boolean }[] {
  const peak = Math.max(r.fillPeakMiB, r.drainPeakMiB);
  const t = BACKLOG_TARGETS;
  return [
    { line: `RSS peak ${peak.toFixed(0)} MiB (target ≤ ${t.peakMiB})`, pass: peak <= t.peakMiB },
    { line: `restart-to-listening ${r.restartMs.toFixed(0)} ms (target ≤ ${t.restartMs})`, pass: r.restartMs <= t.restartMs },
    { line: `drain ${fmt(r.drainRate)} msg/s (target ≥ ${fmt(t.drainRate)})`, pass: r.drainRate >= t.drainRate },
    {
      line: `RSS ${r.settledMiB.toFixed(0)} MiB ${r.settleSeconds === null ? "60 s" : `${r.settleSeconds} s`} after the drain, idle ${
        r.idleMiB.toFixed(0)
      } MiB (target ≤ 2× idle within 60 s)`,
      pass: r.settleSeconds !== null,
    },
    {
      line: `data directory ${r.diskSettledMiB.toFixed(1)} MiB ${r.diskSettleSeconds === null ? "60 s" : `${r.diskSettleSeconds} s`} after the drain, ` +
        `${r.diskFilledMiB.toFixed(0)} MiB full (target ≤ ${t.diskMiB} MiB within 60 s)`,
      pass: r.diskSettleSeconds !== null,
    },
    {
      line: `longest confirmation while the disk was given back ${r.probeMaxConfirmAfterMs.toFixed(1)} ms ` +
        `(target ≤ ${t.pauseMs}; during the drain ${r.probeMaxConfirmDrainMs.toFixed(1)} ms)`,
      pass: r.probeMaxConfirmAfterMs <= t.pauseMs,
    },
    { line: `lost ${r.lost} (target 0)`, pass: r.lost === 0 },
  ];
}

/** What the probe (`rate` role) prints when it is stopped. */
interface ProbeResult {
  confirmed: number;
  failed: number;
  slowConfirms: [sentAt: number, ms: number][];
}
