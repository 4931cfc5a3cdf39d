/**
 * Real etcd servers for tests, on 127.0.0.1 with free ports and a temp data folder each: a single
 * node (`startEtcd()`) or a loopback cluster (`startEtcdCluster(3)`). Ready means etcd's /health
 * says so (polled, never slept on). Nodes can be stopped, killed, paused (SIGSTOP: a node cut off
 * without closing its connections) and resumed. `cleanup()` kills every process by its pid and
 * removes the folders; a process exit kills what is left.
 *
 * etcd comes from Debian's `etcd-server` package; when it is missing the helper throws (the test
 * fails, it is not skipped). `.ci/run` installs it.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, waitFor } from "./broker.ts";

export interface EtcdNode {
  readonly name: string;
  /** `http://127.0.0.1:<port>`, what clients connect to. */
  readonly clientUrl: string;
  readonly peerUrl: string;
  readonly pid: number;
  /** SIGTERM, then waits for the exit. */
  stop(): Promise<void>;
  /** SIGKILL, then waits for the exit. */
  kill(): Promise<void>;
  /** SIGSTOP: the node stops answering but keeps its sockets open, like a host cut off. */
  pause(): void;
  /** SIGCONT after `pause()`. */
  resume(): void;
  /** The last part of what etcd logged (for failure messages). */
  logTail(): string;
}

export interface EtcdCluster {
  readonly nodes: EtcdNode[];
  /** Every node's client URL. */
  readonly endpoints: string[];
  /** Resolves once every running, unpaused node reports healthy (a leader is elected). */
  waitHealthy(timeoutMs?: number): Promise<void>;
  /** The node that is the Raft leader now, as the running nodes report it. */
  raftLeader(): Promise<EtcdNode>;
  /** Kills every node by pid and removes the data folders. */
  cleanup(): Promise<void>;
}

const running = new Set<ReturnType<typeof Bun.spawn>>();
process.on("exit", () => {
  for (const proc of running) {
    try {
      process.kill(proc.pid, "SIGCONT");
      process.kill(proc.pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
});

/** The etcd binary, or an error that says how to install it. */
export function etcdBinary(): string {
  const found = Bun.which("etcd");
  if (!found) {
    throw new Error("Cannot start etcd: no etcd binary on PATH: install Debian's etcd-server (apt-get install -y etcd-server), as .ci/run does");
  }
  return found;
}

/**
 * Returns once every thread of `pid` is stopped (SIGSTOP): a thread in a system call that cannot
 * be interrupted (an fsync on a loaded disk) finishes it first, and may answer a request
 * meanwhile. A CI run saw a paused node still record a write.
 */
function untilStopped(pid: number, name: string): void {
  const stopped = () => {
    try {
      return readdirSync(`/proc/${pid}/task`).every((task) => {
        const stat = readFileSync(`/proc/${pid}/task/${task}/stat`, "utf8");
        return /^[tT]$/.test(stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3));
      });
    } catch {
      return true; // no /proc (not Linux), or the process is gone
    }
  };
  const deadline = Date.now() + 5_000;
  while (!stopped()) {
    if (Date.now() > deadline) throw new Error(`Cannot pause ${name}: a thread of process ${pid} is still running 5 s after SIGSTOP`);
    Bun.sleepSync(1);
  }
}

/** One etcd node on loopback. */
export async function startEtcd(): Promise<EtcdCluster> {
  return await startEtcdCluster(1);
}

/** `size` etcd nodes forming one cluster on loopback (`--initial-cluster`). */
export async function startEtcdCluster(size: number): Promise<EtcdCluster> {
  const binary = etcdBinary();
  const root = mkdtempSync(join(tmpdir(), "kitten-etcd-"));
  const specs: { name: string; clientPort: number; peerPort: number }[] = [];
  const taken = new Set<number>();
  const port = async () => {
    for (;;) {
      const candidate = await freePort();
      if (!taken.has(candidate)) {
        taken.add(candidate);
        return candidate;
      }
    }
  };
  for (let i = 1; i <= size; i++) specs.push({ name: `etcd-${i}`, clientPort: await port(), peerPort: await port() });
  const initialCluster = specs.map((s) => `${s.name}=http://127.0.0.1:${s.peerPort}`).join(",");
  const token = `kitten-test-${process.pid}-${Date.now()}`;

  const nodes: (EtcdNode & { proc: ReturnType<typeof Bun.spawn>; paused: boolean; gone: boolean })[] = [];
  for (const spec of specs) {
    const clientUrl = `http://127.0.0.1:${spec.clientPort}`;
    const peerUrl = `http://127.0.0.1:${spec.peerPort}`;
    const logPath = join(root, `${spec.name}.log`);
    const proc = Bun.spawn(
      [
        binary,
        "--name", spec.name,
        "--data-dir", join(root, spec.name),
        "--listen-client-urls", clientUrl,
        "--advertise-client-urls", clientUrl,
        "--listen-peer-urls", peerUrl,
        "--initial-advertise-peer-urls", peerUrl,
        "--initial-cluster", initialCluster,
        "--initial-cluster-token", token,
        "--initial-cluster-state", "new",
      ],
      { stdin: "ignore", stdout: Bun.file(logPath), stderr: Bun.file(logPath) },
    );
    running.add(proc);
    const node = {
      name: spec.name,
      clientUrl,
      peerUrl,
      pid: proc.pid,
      proc,
      paused: false,
      gone: false,
      async stop() {
        await end(node, "SIGTERM");
      },
      async kill() {
        await end(node, "SIGKILL");
      },
      pause() {
        if (node.gone) throw new Error(`Cannot pause ${node.name}: it is not running`);
        process.kill(proc.pid, "SIGSTOP");
        untilStopped(proc.pid, node.name);
        node.paused = true;
      },
      resume() {
        if (node.gone) throw new Error(`Cannot resume ${node.name}: it is not running`);
        process.kill(proc.pid, "SIGCONT");
        node.paused = false;
      },
      logTail() {
        try {
          return readFileSync(logPath, "utf8").slice(-3000);
        } catch {
          return "";
        }
      },
    };
    nodes.push(node);
  }

  async function end(node: (typeof nodes)[number], signal: "SIGTERM" | "SIGKILL"): Promise<void> {
    if (node.gone) return;
    // A stopped process does not act on SIGTERM until it runs again.
    if (node.paused) process.kill(node.proc.pid, "SIGCONT");
    node.paused = false;
    node.proc.kill(signal);
    await node.proc.exited;
    node.gone = true;
    running.delete(node.proc);
  }

  const cluster: EtcdCluster = {
    nodes,
    endpoints: nodes.map((n) => n.clientUrl),
    async waitHealthy(timeoutMs = 15_000) {
      const live = nodes.filter((n) => !n.gone && !n.paused);
      try {
        await waitFor(async () => {
          for (const node of live) {
            if (node.proc.exitCode !== null) throw new Error(`${node.name} exited with ${node.proc.exitCode}:\n${node.logTail()}`);
          }
          const healthy = await Promise.all(live.map((n) => isHealthy(n.clientUrl)));
          return healthy.every(Boolean);
        }, timeoutMs, "every etcd node healthy");
      } catch (error) {
        const tails = live.map((n) => `--- ${n.name}\n${n.logTail()}`).join("\n");
        throw new Error(`${(error as Error).message}\n${tails}`);
      }
    },
    async raftLeader() {
      const statuses = await Promise.all(nodes.filter((n) => !n.gone && !n.paused).map(async (node) => ({ node, status: await memberStatus(node.clientUrl) })));
      const leaderId = statuses.find((s) => s.status?.leader)?.status?.leader;
      const leader = statuses.find((s) => s.status?.memberId === leaderId)?.node;
      if (!leader) throw new Error(`Cannot find the etcd Raft leader: statuses ${JSON.stringify(statuses.map((s) => s.status))}`);
      return leader;
    },
    async cleanup() {
      await Promise.all(nodes.map((n) => end(n, "SIGKILL")));
      rmSync(root, { recursive: true, force: true });
    },
  };
  try {
    await cluster.waitHealthy();
  } catch (error) {
    await cluster.cleanup();
    throw error;
  }
  return cluster;
}

/** etcd's /health: `{"health":"true"}` once the node has a leader and serves requests. */
async function isHealthy(clientUrl: string): Promise<boolean> {
  try {
    const response = await fetch(`${clientUrl}/health`, { signal: AbortSignal.timeout(1000) });
    if (!response.ok) return false;
    const body = (await response.json()) as { health?: unknown };
    return body.health === "true" || body.health === true;
  } catch {
    return false;
  }
}

/** A node's own member id and the Raft leader it knows (etcd's maintenance status, over HTTP). */
async function memberStatus(clientUrl: string): Promise<{ memberId: string; leader: string } | null> {
  try {
    const response = await fetch(`${clientUrl}/v3/maintenance/status`, { method: "POST", body: "{}", signal: AbortSignal.timeout(1000) });
    const body = (await response.json()) as { header?: { member_id?: string }; leader?: string };
    return body.header?.member_id && body.leader ? { memberId: body.header.member_id, leader: body.leader } : null;
  } catch {
    return null;
  }
}
