/**
 * A Redis server for the peer comparison (scripts/peers.ts): Debian's `redis-server` from PATH on
 * 127.0.0.1, a free port, its data in a temp folder, with the append-only file fsynced before
 * every reply (`appendfsync always`) and no snapshots. The handle is of the benchmark's kind
 * (BenchBroker), so a run counts its CPU as a broker's; stopping it removes the folder.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Redis from "ioredis";
import type { BenchBroker } from "../../src/bench/broker.ts";
import { freePort } from "../../tests/helpers/ports.ts";
import { Child, retryOnPortTaken, tempDirs } from "./processes.ts";

const READY_WITHIN_MS = 15_000;

export function hasRedisServer(): boolean {
  return Bun.which("redis-server") !== null;
}

/** `redis-server --version`'s version, e.g. "7.0.15". */
export async function redisServerVersion(): Promise<string> {
  const run = Bun.spawn(["redis-server", "--version"], { stdout: "pipe", stderr: "pipe" });
  const text = await new Response(run.stdout).text();
  await run.exited;
  return /v=(\d+\.\d+\.\d+)/.exec(text)?.[1] ?? text.trim();
}

export function startRedis(extra: string[] = []): Promise<BenchBroker> {
  return retryOnPortTaken(() => startOnce(extra));
}

async function startOnce(extra: string[]): Promise<BenchBroker> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), "kitten-mq-peer-redis-"));
  tempDirs.add(dir);
  const child = new Child("redis-server", [
    "redis-server",
    ...["--bind", "127.0.0.1", "--port", String(port), "--dir", dir],
    ...["--appendonly", "yes", "--appendfsync", "always", "--save", ""],
    ...extra,
  ]);
  const server: BenchBroker = { child, port, dir, stopping: false, serviceId: "redis" };
  try {
    await waitForPong(server);
    return server;
  } catch (error) {
    await stopRedis(server);
    throw error;
  }
}

export async function stopRedis(server: BenchBroker): Promise<void> {
  server.stopping = true;
  await server.child.stop(3000);
  await rm(server.dir, { recursive: true, force: true });
  tempDirs.delete(server.dir);
}

/** Redis answers PING once it loaded its data and listens; until then a connection is refused. */
async function waitForPong(server: BenchBroker): Promise<void> {
  const deadline = performance.now() + READY_WITHIN_MS;
  let lastError: unknown = null;
  while (performance.now() < deadline) {
    if (server.child.proc.exitCode !== null) {
      await server.child.exited;
      throw new Error(`redis-server exited: ${server.child.stderr.trim().slice(-300) || server.child.lines.slice(-5).join(" | ")}`);
    }
    const redis = new Redis({ host: "127.0.0.1", port: server.port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    redis.on("error", () => {}); // the attempt's failure is read below
    try {
      await redis.connect();
      if ((await redis.ping()) === "PONG") return;
    } catch (error) {
      lastError = error;
    } finally {
      redis.disconnect();
    }
    await Bun.sleep(50);
  }
  throw new Error(`redis-server did not answer within ${READY_WITHIN_MS / 1000} s: ${(lastError as Error)?.message ?? lastError}`);
}
