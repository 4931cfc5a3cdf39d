/**
 * A NATS JetStream cluster for the peer comparison (scripts/peers.ts): `count` nats-server
 * processes (from PATH, Debian's `nats-server`) on 127.0.0.1, free ports, one temp store folder
 * each, routed to each other, and the stream every run publishes to: file storage, `replicas`
 * copies, work-queue retention (a message goes once acked, as in a Kitten-MQ queue). The servers
 * are handles of the benchmark's kind (BenchBroker), so a run counts their CPU as it counts the
 * brokers'; stopping them removes their folders.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect as natsConnect, RetentionPolicy, StorageType } from "nats";
import type { BenchBroker } from "../../src/bench/broker.ts";
import { freePort } from "../../tests/helpers/ports.ts";
import { Child, retryOnPortTaken, tempDirs } from "./processes.ts";
import { STREAM, STREAM_SUBJECTS } from "./jetstream_client.ts";

const READY_WITHIN_MS = 30_000;

/** True when `nats-server` is on PATH. */
export function hasNatsServer(): boolean {
  return Bun.which("nats-server") !== null;
}

/** `nats-server --version`'s version, e.g. "2.9.10". */
export async function natsServerVersion(): Promise<string> {
  const run = Bun.spawn(["nats-server", "--version"], { stdout: "pipe", stderr: "pipe" });
  const text = (await new Response(run.stdout).text()).trim();
  await run.exited;
  return /v?(\d+\.\d+\.\d+)/.exec(text)?.[1] ?? text;
}

export function startJetStream(count: number, replicas: number): Promise<BenchBroker[]> {
  return startJetStreamWith(count, replicas, []);
}

/** The same, with `extra` arguments for every server (a test gives a bad one). */
export function startJetStreamWith(count: number, replicas: number, extra: string[]): Promise<BenchBroker[]> {
  return retryOnPortTaken(() => startOnce(count, replicas, extra));
}

async function startOnce(count: number, replicas: number, extra: string[]): Promise<BenchBroker[]> {
  const ports = await Promise.all(Array.from({ length: count }, () => freePort()));
  const routes = await Promise.all(Array.from({ length: count }, () => freePort()));
  const servers: BenchBroker[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const dir = await mkdtemp(join(tmpdir(), "kitten-mq-peer-nats-"));
      tempDirs.add(dir);
      const others = routes.filter((_, j) => j !== i).map((port) => `nats://127.0.0.1:${port}`);
      const child = new Child(`nats-server-${i}`, [
        "nats-server",
        ...["--addr", "127.0.0.1", "--port", String(ports[i]), "--name", `n${i}`],
        ...["--jetstream", "--store_dir", dir],
        ...(count > 1 ? ["--cluster_name", "kitten-bench", "--cluster", `nats://127.0.0.1:${routes[i]}`, "--routes", others.join(",")] : []),
        ...extra,
      ]);
      servers.push({ child, port: ports[i]!, dir, stopping: false, serviceId: `n${i}` });
    }
    await createStream(servers, replicas);
    return servers;
  } catch (error) {
    await stopJetStream(servers);
    throw error;
  }
}

export async function stopJetStream(servers: BenchBroker[]): Promise<void> {
  await Promise.all(servers.map(async (server) => {
    server.stopping = true;
    await server.child.stop(3000);
    await rm(server.dir, { recursive: true, force: true });
    tempDirs.delete(server.dir);
  }));
}

export const hostsOf = (servers: BenchBroker[]): string[] => servers.map((server) => `127.0.0.1:${server.port}`);

/** Waits for the cluster to elect its JetStream leader (until then requests time out), then adds the stream. */
async function createStream(servers: BenchBroker[], replicas: number): Promise<void> {
  const deadline = performance.now() + READY_WITHIN_MS;
  let lastError: unknown = null;
  while (performance.now() < deadline) {
    for (const server of servers) {
      if (server.child.proc.exitCode !== null) {
        await server.child.exited;
        throw new Error(`${server.child.name} exited: ${server.child.stderr.trim().slice(-300)}`);
      }
    }
    const nc = await natsConnect({ servers: hostsOf(servers), timeout: 1000 }).catch((error) => {
      lastError = error;
      return null;
    });
    if (nc !== null) {
      try {
        const jsm = await nc.jetstreamManager({ timeout: 1000 });
        await jsm.streams.add({
          name: STREAM,
          subjects: STREAM_SUBJECTS,
          storage: StorageType.File,
          num_replicas: replicas,
          retention: RetentionPolicy.Workqueue,
        });
        return;
      } catch (error) {
        lastError = error;
      } finally {
        await nc.close();
      }
    }
    await Bun.sleep(100);
  }
  throw new Error(`the JetStream cluster was not ready within ${READY_WITHIN_MS / 1000} s: ${(lastError as Error)?.message ?? lastError}`);
}
