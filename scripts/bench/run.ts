/**
 * One benchmark run: a fresh broker (and slaves) on port 0 in a temp folder, then the run itself
 * (src/bench/run.ts: the receivers, then the publisher, each its own process, CPU counters before
 * and after); everything stopped and removed at the end, also when the run fails or times out.
 */
import { join } from "node:path";
import { type BenchBroker, startBenchBroker, stopBenchBroker } from "../../src/bench/broker.ts";
import { type Plan as RunPlan, runPlan } from "../../src/bench/run.ts";
import { cpuTotal } from "../../src/bench/processes.ts";
import type { RunResult } from "../../src/bench/results.ts";
import { BROKER_ENV, Child, live, ROOT, tempDirs } from "./processes.ts";
import { freePort } from "../../tests/helpers/ports.ts";
import { nodeBenchClient } from "./node.ts";
import { fmt } from "./report.ts";

const BUN = process.execPath;
const CLIENT = join(ROOT, "scripts", "bench_client.ts");
/** Extra `bun` flags for every process of a run (`--profile`: CPU profiles written on exit). */
export const BUN_FLAGS: string[] = [];
/** The command that runs a Bun bench client (BUN_FLAGS included, read when called). */
export const bunClient = (): string[] => [BUN, ...BUN_FLAGS, CLIENT];
const BROKER_CONFIG = {
  channels: {
    // Scenario (e): the work queue in fsync mode (confirmed = on disk), group commit.
    "bench-durable/v1": { durability: "fsync" },
    // Scenario (d): the same work queue with a format the broker checks on every send.
    "bench-format/v1": {
      map: {
        seq: ["int", "min", 0],
        t: ["number"],
        type: ["string", "min", 1, "max", 64],
        user: ["string", "min", 1],
        amount: ["number", "min", 0],
        currency: ["alpha", "min", 3, "max", 3],
        items: ["int", "min", 0],
      },
    },
  },
};

// ── brokers and clients ─────────────────────────────────────────────────────────────────────────

/** Starts a broker from the sources; (a)–(d) measure the engine in memory mode, (e) is the durable scenario. */
export function startBroker(overrides: Record<string, unknown> = {}): Promise<BenchBroker> {
  return startBenchBroker([BUN, ...BUN_FLAGS, "src/cli/main.ts"], { ...BROKER_CONFIG, ...overrides }, {
    cwd: ROOT,
    env: BROKER_ENV,
    live,
    tempDirs,
  });
}

export const stopBroker = (broker: BenchBroker) => stopBenchBroker(broker, tempDirs);

/** `client` is the command that runs the bench client: Bun on the sources, or Node on its bundle. */
export function spawnClient(client: string[], role: string, options: Record<string, unknown>): Child {
  return new Child(`${role} ${options.clientId}`, [...client, role, JSON.stringify(options)]);
}

// ── one run ────────────────────────────────────────────────────────────────────────────────────

export interface Plan extends RunPlan {
  /** Slave brokers next to the master (scenario f); every client is given every host. */
  slaves?: number;
  /**
   * The brokers know each other (`cluster.peers`, one serviceId each), replicate over peer links,
   * store in fsync mode and confirm only what this many brokers hold (scenario f2).
   */
  minInSyncReplicas?: number;
  /** The runtime of the client processes (the broker always runs on Bun); Bun by default. */
  clients?: "bun" | "node";
}

export async function runOnce(plan: Plan, timeoutMs: number): Promise<RunResult> {
  // Built before the broker starts, so the build is not part of the run.
  const client = plan.clients === "node" ? ["node", await nodeBenchClient()] : bunClient();
  const brokers = await startBrokers(1 + (plan.slaves ?? 0), plan.minInSyncReplicas ?? null);
  const broker = brokers[0]!;
  let result: RunResult | null = null;
  try {
    const { summary, before, after } = await runPlan(plan, {
      hosts: brokers.map((b) => `127.0.0.1:${b.port}@${b.serviceId}`),
      keysDirectory: join(broker.dir, "keys"),
      spawn: (role, options) => spawnClient(client, role, options),
      brokers,
      timeoutMs,
    });
    result = summary;
    if (brokers.length > 1) {
      // The broker column sums every broker; the slaves' share is told apart here.
      const slaves = after.brokers.slice(1).reduce((sum, cpu, i) => sum + cpuTotal(cpu) - cpuTotal(before.brokers[i + 1]!), 0);
      result.note = [result.note, `broker cpu ${(cpuTotal(result.cpu.broker) - slaves).toFixed(2)} master + ${slaves.toFixed(2)} slave`]
        .filter(Boolean).join("; ");
    }
    return result;
  } finally {
    await Promise.all(brokers.map(stopBroker));
    // The store reports its commits when it closes: the database's and the journal's fsynced
    // frames, each one fsync (durable scenarios); `settles` moved journaled messages to the database.
    const closed = broker.child.lines.find((line) => line.includes("store closed"));
    const count = (key: string) => Number(new RegExp(`${key}=(\\d+)`).exec(closed ?? "")?.[1] ?? NaN);
    const commits = count("commits") + count("journalSyncs");
    if (result && commits > 0) {
      const perSecond = Math.round(commits / result.elapsedS);
      const settles = count("settles");
      result.note = [result.note, `${fmt(perSecond)} fsyncs/s`, settles > 0 ? `${fmt(settles)} journal settles` : ""].filter(Boolean).join("; ");
    }
  }
}

/**
 * The master, then the slaves; if one does not start, those that did are stopped before rethrowing.
 * Without `minInSyncReplicas` every broker has the serviceId "broker-1" and the clients mirror
 * what slaves hold; with it, each has its own and they replicate over peer links.
 */
async function startBrokers(count: number, minInSyncReplicas: number | null): Promise<BenchBroker[]> {
  const ports = minInSyncReplicas === null ? [] : await Promise.all(Array.from({ length: count }, () => freePort()));
  const peers = ports.map((port, i) => `127.0.0.1:${port}@b${i}`);
  const overrides = (i: number): Record<string, unknown> =>
    minInSyncReplicas === null ? (i === 0 ? {} : { isMaster: false }) : {
      isMaster: i === 0,
      serviceId: `b${i}`,
      durability: "fsync",
      socketServer: { port: ports[i] },
      cluster: { peers: peers.filter((_, j) => j !== i), minInSyncReplicas },
    };
  const started = await Promise.allSettled(Array.from({ length: count }, (_, i) => startBroker(overrides(i))));
  const brokers = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
  if (failed) {
    await Promise.all(brokers.map(stopBroker));
    throw failed.reason;
  }
  if (minInSyncReplicas !== null) {
    // Sends are refused until enough slaves are in sync: the master says when each is.
    const master = brokers[0]!;
    const inSync = (b: BenchBroker) => master.child.lines.some((line) => line.includes(`peer=${b.serviceId};in sync`));
    const deadline = performance.now() + 15_000;
    while (!brokers.slice(1).every(inSync)) {
      if (performance.now() > deadline) {
        await Promise.all(brokers.map(stopBroker));
        throw new Error("the slaves did not get in sync within 15 s");
      }
      await Bun.sleep(20);
    }
  }
  return brokers;
}
