/**
 * A single etcd node a benchmark starts for itself (the scale-out scenario: groups place their
 * queues in its map): Debian's `etcd` from PATH, on 127.0.0.1 with free ports, its data in a temp
 * folder that goes with it when it stops. Ready means etcd's /health says so (polled).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KittenError } from "../protocol/errors.ts";
import { Child, type ChildOptions } from "./processes.ts";

export interface BenchEtcd {
  child: Child;
  /** `http://127.0.0.1:<port>`: what `cluster.etcd.endpoints` names. */
  endpoint: string;
  dir: string;
}

export interface EtcdOptions extends ChildOptions {
  /** The temp folder is added here while it exists, so an interruption can remove it. */
  tempDirs?: Set<string>;
}

const READY_TIMEOUT_MS = 15_000;

/** The etcd binary on PATH, or null. */
export function etcdBinary(): string | null {
  return Bun.which("etcd");
}

/** Starts etcd and waits until it is healthy; if it is not within 15 s, stops it and removes its folder before rethrowing. */
export async function startBenchEtcd(options: EtcdOptions): Promise<BenchEtcd> {
  const binary = etcdBinary();
  if (binary === null) {
    throw new Error("Cannot start etcd: no etcd binary on PATH: install Debian's etcd-server (apt-get install -y etcd-server)");
  }
  const dir = await mkdtemp(join(tmpdir(), "kitten-mq-bench-etcd-"));
  options.tempDirs?.add(dir);
  let child: Child | null = null;
  try {
    const [clientPort, peerPort] = await twoFreePorts();
    const endpoint = `http://127.0.0.1:${clientPort}`;
    const peer = `http://127.0.0.1:${peerPort}`;
    child = new Child("etcd", [
      binary,
      ...["--name", "bench", "--data-dir", join(dir, "data")],
      ...["--listen-client-urls", endpoint, "--advertise-client-urls", endpoint],
      ...["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", `bench=${peer}`],
    ], options);
    const deadline = performance.now() + READY_TIMEOUT_MS;
    while (!(await healthy(endpoint))) {
      if (child.proc.exitCode !== null) throw new Error(`etcd exited with code ${child.proc.exitCode}: ${child.stderr.trim().slice(-300)}`);
      if (performance.now() > deadline) throw new KittenError("TIMEOUT", `Cannot start etcd for the benchmark: it was not healthy within ${READY_TIMEOUT_MS / 1000} s`);
      await Bun.sleep(50);
    }
    return { child, endpoint, dir };
  } catch (error) {
    await child?.stop(3000);
    await removeDir(dir, options.tempDirs);
    throw error;
  }
}

export async function stopBenchEtcd(etcd: BenchEtcd, tempDirs?: Set<string>): Promise<void> {
  await etcd.child.stop(3000);
  await removeDir(etcd.dir, tempDirs);
}

/**
 * How many keys start with `prefix` (etcd's JSON gateway, keys only): the benchmark waits until
 * every queue is placed and every group's broker is listed before it sends.
 */
export async function countKeys(endpoint: string, prefix: string): Promise<number> {
  const bytes = new TextEncoder().encode(prefix);
  const end = bytes.slice();
  end[end.length - 1]!++; // the range [prefix, prefix with its last byte + 1) is every key under it
  const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
  const response = await fetch(`${endpoint}/v3/kv/range`, {
    method: "POST",
    body: JSON.stringify({ key: b64(bytes), range_end: b64(end), count_only: true }),
    signal: AbortSignal.timeout(2000),
  });
  if (!response.ok) throw new Error(`etcd answered ${response.status} to a range read`);
  const body = (await response.json()) as { count?: string };
  return Number(body.count ?? 0);
}

async function healthy(endpoint: string): Promise<boolean> {
  try {
    const response = await fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(1000) });
    const body = (await response.json()) as { health?: unknown };
    return response.ok && String(body.health) === "true";
  } catch {
    return false;
  }
}

/** Two ports that were free a moment ago, held open together so they differ. */
function twoFreePorts(): Promise<[number, number]> {
  const listen = () =>
    new Promise<ReturnType<typeof createServer>>((resolve, reject) => {
      const server = createServer();
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve(server));
    });
  return Promise.all([listen(), listen()]).then(async (servers) => {
    const ports = servers.map((server) => (server.address() as { port: number }).port) as [number, number];
    await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
    return ports;
  });
}

async function removeDir(dir: string, tempDirs?: Set<string>): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  tempDirs?.delete(dir);
}
