/**
 * A broker a benchmark starts for itself: `kitten-mq start --config <temp folder>/…` on port 0
 * (the same program, from the sources or the compiled binary), its data and pinned keys in that
 * folder, which goes with the broker when it stops.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Child, type ChildOptions, withTimeout } from "./processes.ts";

/** The settings every benchmark broker shares; a run adds its own (durability, channels, cluster). */
export const BENCH_BROKER_CONFIG = {
  socketServer: { port: 0 },
  isManagementInterface: false,
  logLevel: 2, // info: the store reports its commit count when it closes
  durability: "memory",
  prefetch: 1000,
  listenerPrefetch: 1000,
  maxItemsInQueue: 1000000,
};

export interface BenchBroker {
  child: Child;
  port: number;
  serviceId: string;
  dir: string;
  /** Set when we stop it: an exit before that is a crash. */
  stopping: boolean;
}

export interface StartOptions extends ChildOptions {
  /** The temp folder is added here while it exists, so an interruption can remove it. */
  tempDirs?: Set<string>;
}

/**
 * Starts `[...command, "start", "--config", FILE]` with `config` (merged over the shared settings)
 * and waits for its `listening` line; if it does not come up, stops it and removes its folder
 * before rethrowing.
 */
export async function startBenchBroker(command: string[], config: Record<string, unknown>, options: StartOptions): Promise<BenchBroker> {
  const dir = await mkdtemp(join(tmpdir(), "kitten-mq-bench-"));
  options.tempDirs?.add(dir);
  let child: Child | null = null;
  try {
    const configPath = join(dir, "kitten-mq.config.json");
    await writeFile(configPath, JSON.stringify({ ...BENCH_BROKER_CONFIG, ...config }));
    child = new Child("broker", [...command, "start", "--config", configPath], options);
    const line = await withTimeout(child.waitFor("kitten-mq listening on "), 15_000, "the broker did not start within 15 s");
    const port = Number(/:(\d+)$/.exec(line)?.[1]);
    if (!Number.isInteger(port) || port <= 0) throw new Error(`cannot parse the broker port from "${line}"`);
    return { child, port, dir, stopping: false, serviceId: String(config.serviceId ?? "broker-1") };
  } catch (error) {
    await child?.stop(3000);
    await removeDir(dir, options.tempDirs);
    throw error;
  }
}

export async function stopBenchBroker(broker: BenchBroker, tempDirs?: Set<string>): Promise<void> {
  broker.stopping = true;
  await broker.child.stop(3000);
  await removeDir(broker.dir, tempDirs);
}

async function removeDir(dir: string, tempDirs?: Set<string>): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  tempDirs?.delete(dir);
}
