/**
 * Subprocess brokers of one cluster for the kill -9 catch-up tests (tests/e2e/catch_up_crash_test.ts):
 * brokers that know each other through cluster.peers and come back on the same ports and folders,
 * their GET /status and log lines, etcd for elections, relays on their links, and a publisher that
 * counts what was confirmed against what a consumer gets in the end. Everything started is gone
 * after each test.
 */
import { afterEach, expect, it } from "bun:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client, type KittenError } from "../../mod.ts";
import { Cleanup, clientOptions, freePort, waitFor } from "./broker.ts";
import { type ChildBroker, kill9, spawnBroker } from "./crash.ts";
import { type EtcdCluster, startEtcd } from "./etcd.ts";
import { type Relay, startRelay } from "./relay.ts";
import { TempDirs } from "./temp_dir.ts";
import type { ClusterStatus } from "../../src/server/cluster/cluster.ts";
import type { ReplicaStatus } from "../../src/server/cluster/replication.ts";

export const cleanup = new Cleanup();
export const temps = new TempDirs("kitten-catch-up-crash-");
export const brokers: Proc[] = [];
export const etcds: EtcdCluster[] = [];

afterEach(async () => {
  await cleanup.run(); // clients and relays first
  for (const broker of brokers.splice(0)) await broker.kill();
  for (const etcd of etcds.splice(0)) await etcd.cleanup();
  temps.removeAll();
});

// ── subprocess brokers that know each other through cluster.peers ────────────────────────────

/** What GET /status answers, as far as these tests read it. */
export interface Status {
  role: "master" | "slave";
  cluster: ClusterStatus;
}

/** One broker: its ports and folder stay, so a restart is the same broker coming back. */
export class Proc {
  child: ChildBroker | null = null;
  /** What earlier lives of this broker wrote; `output()` adds the running one's. */
  #earlier = "";
  peers: string[] = [];
  readonly configPath: string;

  constructor(
    readonly name: string,
    readonly port: number,
    readonly adminPort: number,
    readonly dir: string,
    public settings: Record<string, unknown>,
  ) {
    this.configPath = join(dir, "broker.json");
  }

  get host(): string {
    return `127.0.0.1:${this.port}@${this.name}`;
  }

  /** Writes the config file (a reload reads it again). */
  writeConfig(): void {
    const cluster = this.settings.cluster as Record<string, unknown> | undefined;
    mkdirSync(this.dir, { recursive: true });
    writeFileSync(
      this.configPath,
      JSON.stringify({
        serviceId: this.name,
        keysDirectory: join(this.dir, "keys"),
        registeredClientsPath: join(this.dir, "clients"),
        dataDirectory: join(this.dir, "data"),
        durability: "fsync",
        prefetch: 1000,
        logLevel: 2, // the catch-up plans are info lines
        isManagementInterface: true,
        httpServerPort: this.adminPort,
        admin: { host: "127.0.0.1" },
        ...this.settings,
        socketServer: { port: this.port, host: "127.0.0.1" },
        cluster: { minInSyncReplicas: 2, ...cluster, peers: this.peers },
      }),
    );
  }

  /** Starts the process; resolves once its admin API answers. */
  async start(): Promise<this> {
    if (this.running) throw new Error(`${this.name} already runs`);
    this.writeConfig();
    this.child = await spawnBroker(this.configPath, 20_000);
    await waitFor(() => this.output().includes(`admin on http://127.0.0.1:${this.adminPort}`), 10_000, `${this.name}'s admin API`);
    return this;
  }

  get running(): boolean {
    return this.child !== null && this.child.proc.exitCode === null && this.child.proc.signalCode === null;
  }

  /** SIGKILL (a stopped process too), and wait until it is gone. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child) return;
    if (this.running) await kill9(child);
    this.#earlier += child.output();
    this.child = null;
  }

  /** SIGTERM: a graceful stop (the broker saves its replication position); resolves once it exited 0. */
  async stop(): Promise<void> {
    const child = this.child;
    if (!child || !this.running) throw new Error(`${this.name} is not running`);
    child.proc.kill("SIGTERM");
    const code = await child.exited;
    this.#earlier += child.output();
    this.child = null;
    if (code !== 0) throw new Error(`${this.name} exited with ${code} after SIGTERM:\n${child.output()}`);
  }

  /** SIGSTOP: the process keeps its sockets and answers nothing; `resume()` continues it. */
  pause(): void {
    this.child?.proc.kill("SIGSTOP");
  }

  resume(): void {
    this.child?.proc.kill("SIGCONT");
  }

  /** Everything every life of this broker wrote. */
  output(): string {
    return this.#earlier + (this.child?.output() ?? "");
  }

  async #get(path: string): Promise<Response> {
    return await fetch(`http://127.0.0.1:${this.adminPort}${path}`, { signal: AbortSignal.timeout(2_000) });
  }

  async status(): Promise<Status> {
    return (await (await this.#get("/status")).json()) as Status;
  }

  /** The status, or null while the process does not answer (starting, killed). */
  async statusOrNull(): Promise<Status | null> {
    if (!this.running) return null;
    try {
      return await this.status();
    } catch {
      return null;
    }
  }

  /** Messages of `queue` in this broker's store (0 for a queue it never saw). */
  async stored(queue: string): Promise<number> {
    const response = await this.#get(`/queues/${queue}`);
    if (response.status === 404) return 0;
    return ((await response.json()) as { disk: { messages: number } }).disk.messages;
  }

  /** The replica `name` as this broker, master, sees it. */
  async replica(name: string): Promise<ReplicaStatus | undefined> {
    return (await this.statusOrNull())?.cluster.replicas.find((r) => r.peer === name);
  }

  /** `isMaster` in the file, then POST /reload (`force`: even when this slave is not in sync). */
  async promote(force = false): Promise<void> {
    this.settings = { ...this.settings, isMaster: true };
    this.writeConfig();
    const response = await fetch(`http://127.0.0.1:${this.adminPort}/reload${force ? "?force=true" : ""}`, { method: "POST" });
    if (!response.ok) throw new Error(`${this.name} refused the promotion: ${await response.text()}`);
  }

  /** `isMaster` false in the file, for its next start. */
  demote(): void {
    this.settings = { ...this.settings, isMaster: false };
  }
}

/**
 * `count` brokers that list each other as peers (a test may change a broker's `peers` before it
 * starts it), not started: in manual mode the first is master; with `etcd`, etcd elects.
 */
export async function brokersOf(count: number, settings: Record<string, unknown> = {}, options: { etcd?: EtcdCluster } = {}): Promise<Proc[]> {
  const root = temps.make();
  const procs: Proc[] = [];
  for (let i = 0; i < count; i++) {
    const cluster = {
      ...(settings.cluster as Record<string, unknown> | undefined),
      ...(options.etcd ? { etcd: { endpoints: options.etcd.endpoints, leaseTtlSeconds: 2 } } : {}),
    };
    const proc = new Proc(`b${i}`, await freePort(), await freePort(), join(root, `b${i}`), {
      ...settings,
      isMaster: options.etcd ? false : i === 0,
      cluster,
    });
    procs.push(proc);
    brokers.push(proc);
  }
  for (const proc of procs) {
    proc.peers = procs.filter((other) => other !== proc).map((other) => other.host);
  }
  return procs;
}

export async function startAll(procs: Proc[]): Promise<void> {
  await Promise.all(procs.map((proc) => proc.start()));
}

/** A relay in front of `proc`'s port (tests/helpers/relay.ts), closed after the test. */
export async function relayTo(proc: Proc): Promise<Relay> {
  const relay = await startRelay(proc.port);
  cleanup.defer(() => relay.close());
  return relay;
}

export async function etcd(): Promise<EtcdCluster> {
  const started = await startEtcd();
  etcds.push(started);
  return started;
}

/** Resolves once `master` says every broker named is an in-sync replica of it. */
export async function inSync(master: Proc, names: string[], timeoutMs = 15_000): Promise<void> {
  await waitFor(async () => {
    const status = await master.statusOrNull();
    return status?.role === "master" && names.every((name) => status.cluster.replicas.some((r) => r.peer === name && r.state === "in-sync"));
  }, timeoutMs, `${names.join(", ")} in sync with ${master.name}`);
}

/** Resolves once every replica of `master` has acknowledged everything it was sent. */
export async function acknowledged(master: Proc, timeoutMs = 10_000): Promise<void> {
  await waitFor(async () => (await master.status()).cluster.replicas.every((r) => r.lagEntries === 0), timeoutMs, `${master.name}'s replicas acknowledged`);
}

/** The running broker that says it is master (etcd mode: the last one elected). */
export async function masterAmong(procs: Proc[], timeoutMs = 15_000): Promise<Proc> {
  let found: Proc | undefined;
  await waitFor(async () => {
    for (const proc of procs) {
      if ((await proc.statusOrNull())?.role === "master") found = proc;
    }
    return found;
  }, timeoutMs, "a master among the running brokers");
  return found!;
}

/** The master's catch-up plans for `peer`, oldest first: "position" or the snapshot's reason. */
export function plansFor(master: Proc, peer: string): string[] {
  const plans: string[] = [];
  for (const line of master.output().split("\n")) {
    if (line.includes(`peer=${peer};catching up from index `)) plans.push("position");
    const snapshot = new RegExp(`peer=${peer};catching up;snapshot=\\d+ messages;index=\\d+;because (.*)$`).exec(line);
    if (snapshot) plans.push(`snapshot: ${snapshot[1]}`);
  }
  return plans;
}

export const NO_POSITION = "snapshot: it holds no position (a new store, a memory-only broker, or an older version)";

// ── clients ──────────────────────────────────────────────────────────────────────────────────

export async function client(hosts: string[]): Promise<Client> {
  const mq = new Client();
  mq.on("error", (_error: KittenError) => {}); // killed brokers are expected here
  cleanup.add(mq);
  await mq.connect(clientOptions({ host: hosts[0]! }, { hosts, reconnectDelayMs: 10, maxReconnectDelayMs: 50, maxPendingMessages: 50_000 }));
  return mq;
}

/**
 * Sends `{ n }` to `<queue>/x` and records each n confirmed in `confirmed` (and each send the
 * client gave up on in `failures`). The client keeps a refused or cut-off send and sends it again
 * (same message id) until it is confirmed, across kills and failovers.
 */
export function sender(mq: Client, queue: string) {
  const channel = `${queue}/x`;
  const confirmed = new Set<number>();
  const failures: string[] = [];
  const inFlight = new Set<Promise<unknown>>();
  const send = (n: number) => {
    const sent = mq.send(channel, { n }).then(() => confirmed.add(n), (error: KittenError) => failures.push(`${n}: ${error.code}`));
    inFlight.add(sent);
    sent.finally(() => inFlight.delete(sent));
    return sent;
  };
  return {
    confirmed,
    failures,
    /** Sends [from, to) without waiting. */
    start(from: number, to: number): void {
      for (let n = from; n < to; n++) send(n);
    },
    /** Sends [from, to) and resolves once each is confirmed (or failed). */
    async sendAll(from: number, to: number, window = 2_000): Promise<void> {
      for (let start = from; start < to; start += window) {
        const batch: Promise<unknown>[] = [];
        for (let n = start; n < Math.min(to, start + window); n++) batch.push(send(n));
        await Promise.all(batch);
      }
    },
    /** Resolves once nothing sent is waiting for its confirmation. */
    async settled(timeoutMs = 20_000): Promise<void> {
      await waitFor(() => inFlight.size === 0, timeoutMs, `every send to ${channel} confirmed (${inFlight.size} waiting)`);
    },
  };
}

/**
 * Consumes `queue` from `hosts` until every n in `confirmed` arrived (or `timeoutMs`), and
 * returns those that never did.
 */
export async function lostOf(hosts: string[], queue: string, confirmed: Set<number>, timeoutMs = 20_000): Promise<number[]> {
  const consumer = await client(hosts);
  const received = new Set<number>();
  await consumer.consume(`${queue}/*`, (error, message, done) => {
    if (error) return;
    received.add((message as { n: number }).n);
    done();
  }, { prefetch: 1000 }).ready;
  await waitFor(() => received.size >= confirmed.size && [...confirmed].every((n) => received.has(n)), timeoutMs, "every confirmed message delivered")
    .catch(() => {}); // the caller asserts on what is missing
  return [...confirmed].filter((n) => !received.has(n)).sort((a, b) => a - b);
}

/** Nothing the client gave up on, and every message confirmed to it delivered by `hosts` in the end. */
export async function expectNoneLost(publisher: ReturnType<typeof sender>, hosts: string[], queue: string): Promise<void> {
  expect(publisher.failures).toEqual([]);
  expect(await lostOf(hosts, queue, publisher.confirmed)).toEqual([]);
}

/** Three brokers (b0 master) in sync, and a publisher to all three with `backlog` sends to `queue` confirmed by all. */
export async function threeInSync(queue: string, backlog: number) {
  const procs = await brokersOf(3);
  await startAll(procs);
  await inSync(procs[0]!, ["b1", "b2"]);
  const publisher = sender(await client(procs.map((p) => p.host)), queue);
  await publisher.sendAll(0, backlog);
  await acknowledged(procs[0]!);
  return { procs: procs as [Proc, Proc, Proc], publisher };
}
