/**
 * One benchmark run: a fresh broker (and slaves) on port 0 in a temp folder, the receivers, then
 * the publisher, each its own process; CPU counters before and after; everything stopped and
 * removed at the end, also when the run fails or times out.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Child, cpuTimes, cpuTotal, machineBusySeconds, ROOT, tempDirs, withTimeout } from "./processes.ts";
import { freePort } from "../../tests/helpers/ports.ts";
import { nodeBenchClient } from "./node.ts";
import { fmt } from "./report.ts";
import { type PublisherResult, type ReceiverResult, type RunResult, type Snapshot, summarize } from "./results.ts";

const BUN = process.execPath;
const CLIENT = join(ROOT, "scripts", "bench_client.ts");
/** Extra `bun` flags for every process of a run (`--profile`: CPU profiles written on exit). */
export const BUN_FLAGS: string[] = [];
const BROKER_CONFIG = {
  socketServer: { port: 0 },
  isManagementInterface: false,
  logLevel: 2, // info: the store reports its commit count when it closes
  durability: "memory", // (a)–(d) measure the engine; (e) is the durable scenario
  prefetch: 1000,
  listenerPrefetch: 1000,
  maxItemsInQueue: 1000000,
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

interface Broker {
  child: Child;
  port: number;
  serviceId: string;
  dir: string;
  /** Set when we stop it: an exit before that is a crash. */
  stopping: boolean;
}

/** Starts a broker; if it does not come up, stops it and removes its folder before rethrowing. */
async function startBroker(overrides: Record<string, unknown> = {}): Promise<Broker> {
  const dir = await mkdtemp(join(tmpdir(), "kitten-mq-bench-"));
  tempDirs.add(dir);
  let child: Child | null = null;
  try {
    const configPath = join(dir, "kitten-mq.config.json");
    await writeFile(configPath, JSON.stringify({ ...BROKER_CONFIG, ...overrides }));
    child = new Child("broker", [BUN, ...BUN_FLAGS, "src/cli/main.ts", "start", "--config", configPath]);
    const line = await withTimeout(child.waitFor("kitten-mq listening on "), 15_000, "broker did not start within 15 s");
    const port = Number(/:(\d+)$/.exec(line)?.[1]);
    if (!Number.isInteger(port) || port <= 0) throw new Error(`cannot parse the broker port from "${line}"`);
    return { child, port, dir, stopping: false, serviceId: String(overrides.serviceId ?? "broker-1") };
  } catch (error) {
    await child?.stop(3000);
    await removeDir(dir);
    throw error;
  }
}

async function stopBroker(broker: Broker): Promise<void> {
  broker.stopping = true;
  await broker.child.stop(3000);
  await removeDir(broker.dir);
}

async function removeDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  tempDirs.delete(dir);
}

/** `client` is the command that runs the bench client: Bun on the sources, or Node on its bundle. */
function spawnClient(client: string[], role: string, options: Record<string, unknown>): Child {
  return new Child(`${role} ${options.clientId}`, [...client, role, JSON.stringify(options)]);
}

// ── one run ────────────────────────────────────────────────────────────────────────────────────

export interface Plan {
  /** Slave brokers next to the master (scenario f); every client is given every host. */
  slaves?: number;
  /**
   * The brokers know each other (`cluster.peers`, one serviceId each), replicate over peer links,
   * store in fsync mode and confirm only what this many brokers hold (scenario f2).
   */
  minInSyncReplicas?: number;
  receivers: { role: "consumer" | "listener"; options: Record<string, unknown> }[];
  publisher: { role: "publisher" | "rate"; options: Record<string, unknown> };
  /** The runtime of the client processes (the broker always runs on Bun); Bun by default. */
  clients?: "bun" | "node";
}

export async function runOnce(plan: Plan, timeoutMs: number): Promise<RunResult> {
  // Built before the broker starts, so the build is not part of the run.
  const client = plan.clients === "node" ? ["node", await nodeBenchClient()] : [BUN, ...BUN_FLAGS, CLIENT];
  const brokers = await startBrokers(1 + (plan.slaves ?? 0), plan.minInSyncReplicas ?? null);
  const broker = brokers[0]!;
  const children: Child[] = [];
  let result: RunResult | null = null;
  try {
    const hosts = brokers.map((b) => `127.0.0.1:${b.port}@${b.serviceId}`);
    const work = (async () => {
      const keysDirectory = join(broker.dir, "keys");
      const receivers = plan.receivers.map((r) => spawnClient(client, r.role, { hosts, keysDirectory, ...r.options }));
      children.push(...receivers);
      await Promise.all(receivers.map((child) => child.waitFor("ready")));
      const before = await snapshot(brokers, receivers);
      const publisher = spawnClient(client, plan.publisher.role, { hosts, keysDirectory, ...plan.publisher.options });
      children.push(publisher);
      const [published, ...received] = await Promise.all([
        publisher.waitJson<PublisherResult>("result"),
        ...receivers.map((child) => child.waitJson<ReceiverResult>("result")),
      ]);
      const after = await snapshot(brokers, []);
      const summary = summarize(published!, received as ReceiverResult[], before, after);
      if (brokers.length > 1) {
        // The broker column sums every broker; the slaves' share is told apart here.
        const slaves = after.brokers.slice(1).reduce((sum, cpu, i) => sum + cpuTotal(cpu) - cpuTotal(before.brokers[i + 1]!), 0);
        summary.note = [summary.note, `broker cpu ${(cpuTotal(summary.cpu.broker) - slaves).toFixed(2)} master + ${slaves.toFixed(2)} slave`]
          .filter(Boolean).join("; ");
      }
      return summary;
    })();
    const crashed = new Promise<never>((_, reject) => {
      for (const b of brokers) {
        b.child.exited.then((code) => {
          if (!b.stopping) {
            const which = b === broker ? "the broker" : "a slave broker";
            reject(new Error(`${which} exited with code ${code}: ${b.child.stderr.trim().slice(-300)}`));
          }
        });
      }
    });
    result = await withTimeout(Promise.race([work, crashed]), timeoutMs, `timed out after ${timeoutMs / 1000} s`).catch(
      async (error) => {
        throw new Error(`${(error as Error).message}${await progress(children)}`);
      },
    );
    return result;
  } finally {
    await Promise.all(children.map((child) => child.stop()));
    await Promise.all(brokers.map(stopBroker));
    // The store reports its commits when it closes; each commit is one fsync (durable scenarios).
    const closed = broker.child.lines.find((line) => line.includes("store closed"));
    const commits = Number(/commits=(\d+)/.exec(closed ?? "")?.[1] ?? NaN);
    if (result && commits > 0) {
      const perSecond = Math.round(commits / result.elapsedS);
      result.note = [result.note, `${fmt(perSecond)} fsyncs/s`].filter(Boolean).join("; ");
    }
  }
}

/**
 * The master, then the slaves; if one does not start, those that did are stopped before rethrowing.
 * Without `minInSyncReplicas` every broker has the serviceId "broker-1" and the clients mirror
 * what slaves hold; with it, each has its own and they replicate over peer links.
 */
async function startBrokers(count: number, minInSyncReplicas: number | null): Promise<Broker[]> {
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
    const inSync = (b: Broker) => master.child.lines.some((line) => line.includes(`peer=${b.serviceId};in sync`));
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

/** CPU counters at one moment: the machine, this process, the brokers and the receivers. */
async function snapshot(brokers: Broker[], receivers: Child[]): Promise<Snapshot> {
  const self = process.cpuUsage();
  const each = await Promise.all(brokers.map((broker) => cpuTimes(broker.child.pid)));
  return {
    at: performance.now(),
    machine: await machineBusySeconds(),
    self: { user: self.user / 1e6, system: self.system / 1e6 },
    broker: each.reduce((sum, cpu) => ({ user: sum.user + cpu.user, system: sum.system + cpu.system })),
    brokers: each,
    receivers: await Promise.all(receivers.map((child) => cpuTimes(child.pid))),
  };
}

/** What each child had done when a run failed: receivers print `partial` on SIGTERM. */
async function progress(children: Child[]): Promise<string> {
  const notes: string[] = [];
  for (const child of children) {
    if (child.proc.exitCode === null && child.proc.signalCode === null) {
      child.proc.kill("SIGTERM");
      const partial = await withTimeout(child.waitJson<ReceiverResult>("partial"), 1000, "").catch(() => null);
      if (partial) {
        notes.push(`${child.name}: ${partial.received}/${partial.expected} received, ${partial.duplicates} duplicates`);
      } else notes.push(`${child.name}: no report`);
    } else {
      notes.push(`${child.name}: exited ${child.proc.exitCode ?? child.proc.signalCode}`);
    }
    const stderr = child.stderr.trim();
    if (stderr) notes.push(`  ${child.name} stderr: ${stderr.split("\n").slice(-3).join(" | ")}`);
  }
  return notes.length > 0 ? `\n      ${notes.join("\n      ")}` : "";
}
