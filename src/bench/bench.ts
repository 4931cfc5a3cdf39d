/**
 * `kitten-mq bench`'s run: against the brokers named (checked reachable first), or against a
 * broker it starts itself from the same program (`start --config` on port 0 in a temp folder);
 * then each scenario in turn, its workers being this program again (the hidden bench-worker
 * command). Everything it starts is stopped, and every temp folder removed, when it ends: done,
 * failed or aborted (Ctrl-C).
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { KittenError } from "../protocol/errors.ts";
import { parseHost } from "../protocol/host.ts";
import { VERSION } from "../version.ts";
import { type BenchBroker, startBenchBroker, stopBenchBroker } from "./broker.ts";
import { scenarioFigures, type ScenarioFigures } from "./figures.ts";
import { brokerEnv, Child, childEnv, selfCommand, WORKER_COMMAND } from "./processes.ts";
import { WARMUP_SHARE } from "./results.ts";
import { runPlan } from "./run.ts";
import { scenario, type ScenarioName, type Settings } from "./scenarios.ts";

export interface BenchOptions extends Settings {
  scenarios: ScenarioName[];
  /** The brokers to measure, as the client's `hosts`; null: start one. */
  hosts: string[] | null;
  /** The durability of the broker it starts. */
  durability: "memory" | "fsync";
}

export interface BenchHooks {
  /** The environment of the processes it starts. */
  env: Record<string, string | undefined>;
  /** One line on what starts or ends (the CLI shows it on stderr). */
  progress?(line: string): void;
  /** Aborting ends every process it started: the run then rejects. */
  signal?: AbortSignal;
}

export interface BenchReport {
  version: string;
  bun: string;
  cores: number;
  broker: {
    hosts: string[];
    startedByBench: boolean;
    /** The started broker's durability; null for brokers elsewhere (their config decides). */
    durability: "memory" | "fsync" | null;
    /** Whether the broker's CPU is in the figures (only when it runs here, started by bench). */
    cpuMeasured: boolean;
  };
  settings: Settings & { warmupShare: number };
  scenarios: ScenarioFigures[];
}

const PROBE_TIMEOUT_MS = 3000;

export async function runBench(options: BenchOptions, hooks: BenchHooks): Promise<BenchReport> {
  const live = new Set<Subprocess>();
  const tempDirs = new Set<string>();
  const kill = () => {
    for (const proc of live) proc.kill("SIGKILL");
  };
  hooks.signal?.addEventListener("abort", kill);
  // One id per run: its channels and client ids are new, so nothing an earlier run left counts.
  const runId = randomBytes(3).toString("hex");
  let broker: BenchBroker | null = null;
  try {
    const keysDirectory = await mkdtemp(join(tmpdir(), "kitten-mq-bench-keys-"));
    tempDirs.add(keysDirectory);
    let hosts: string[];
    if (options.hosts) {
      await Promise.all(options.hosts.map(probe));
      hosts = options.hosts;
    } else {
      hooks.progress?.(`starting a broker (${options.durability})`);
      broker = await startBenchBroker(selfCommand(), { durability: options.durability }, { env: brokerEnv(hooks.env), live, tempDirs });
      hosts = [`127.0.0.1:${broker.port}@${broker.serviceId}`];
    }
    const spawn = (role: string, workerOptions: Record<string, unknown>) =>
      new Child(`${role} ${workerOptions.clientId}`, [...selfCommand(), WORKER_COMMAND, role, JSON.stringify(workerOptions)], {
        env: childEnv(hooks.env),
        live,
      });
    const figures: ScenarioFigures[] = [];
    for (const name of options.scenarios) {
      if (hooks.signal?.aborted) break;
      const planned = scenario(name, options, runId);
      hooks.progress?.(`${planned.title}: ${planned.count.toLocaleString("en-US")} messages`);
      const outcome = await runPlan(planned.plan, { hosts, keysDirectory, spawn, brokers: broker ? [broker] : [], timeoutMs: planned.timeoutMs });
      figures.push(scenarioFigures(planned, outcome, broker !== null));
    }
    if (hooks.signal?.aborted) throw new KittenError("CLOSED", "Cannot finish the benchmark: interrupted");
    return {
      version: VERSION,
      bun: Bun.version,
      cores: navigator.hardwareConcurrency,
      broker: { hosts, startedByBench: broker !== null, durability: broker ? options.durability : null, cpuMeasured: broker !== null },
      settings: {
        count: options.count,
        size: options.size,
        window: options.window,
        prefetch: options.prefetch,
        listeners: options.listeners,
        rate: options.rate,
        channel: options.channel,
        warmupShare: WARMUP_SHARE,
      },
      scenarios: figures,
    };
  } finally {
    hooks.signal?.removeEventListener("abort", kill);
    if (broker) await stopBenchBroker(broker, tempDirs);
    kill(); // nothing should be left; if something is, it goes
    for (const dir of tempDirs) await rm(dir, { recursive: true, force: true });
  }
}

/** Resolves once `host` accepts a TCP connection; a KittenError UNREACHABLE otherwise. */
function probe(label: string): Promise<void> {
  const { host, port } = parseHost(label);
  return new Promise((resolve, reject) => {
    const socket = new Socket();
    const fail = (why: string) => {
      socket.destroy();
      reject(new KittenError("UNREACHABLE", `Cannot reach a broker on ${host}:${port} (${why}): is it running, and is --host right?`));
    };
    socket.setTimeout(PROBE_TIMEOUT_MS, () => fail(`no answer within ${PROBE_TIMEOUT_MS / 1000} s`));
    socket.once("error", (error: NodeJS.ErrnoException) => fail(error.code ?? error.message));
    socket.connect(port, host, () => {
      socket.destroy();
      resolve();
    });
  });
}
