/**
 * Shared setup of the several-brokers end-to-end tests (tests/e2e/cluster*_test.ts): brokers in
 * process that stop and come back on the same port with the same folder and store (`Node`, on
 * tests/helpers/in_process_broker.ts), subprocess brokers that are killed with SIGKILL
 * (tests/helpers/crash.ts), clients of several hosts, a TCP relay that can cut links
 * (tests/helpers/relay.ts), and a publisher that keeps a window of sends in flight.
 *
 * Every broker of a cluster has the serviceId "broker-1" (the JWT audience); the host strings
 * differ by port.
 */
import { afterEach } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client, type KittenError } from "../../mod.ts";
import { Cleanup, clientOptions, freePort, type Received, waitFor } from "./broker.ts";
import { type ChildBroker, kill9, spawnBroker, writeBrokerConfig } from "./crash.ts";
import { TempDirs } from "./temp_dir.ts";
import { InProcessBroker } from "./in_process_broker.ts";
import { startRelay } from "./relay.ts";
import { type Config, parseConfig } from "../../src/server/config/config.ts";
import type { Store } from "../../src/server/store/store.ts";

// ── in-process brokers that can stop and come back (same port, same folder, same store) ──────

export class Node extends InProcessBroker {
  constructor(
    name: string,
    dir: string,
    overrides: Record<string, unknown>,
    /** A store of our own (default: the one the config asks for). */
    makeStore?: () => Store,
  ) {
    super(name, "broker-1", 0, dir, overrides);
    this.makeStore = makeStore;
  }

  config(): Config {
    return parseConfig({ ...this.folders(), ...this.overrides, socketServer: { port: this.port, host: "127.0.0.1" } });
  }

  /** Messages with a live copy in `queue` on this broker. */
  live(queue: string): number {
    return this.broker.queues.get(queue)?.live ?? 0;
  }

  /** Messages `queue` on this broker has taken in (a stored one once its commit is done). */
  received(queue: string): number {
    return this.broker.queues.get(queue)?.counters.received ?? 0;
  }

  /** Deliveries this broker (this life of it) wrote to clients. */
  get deliveries(): number {
    return this.broker.stats.counters.sent;
  }

  /** What an operator does: isMaster true in the config, then reload. */
  promote(): void {
    this.overrides = { ...this.overrides, isMaster: true };
    this.broker.reload(parseConfig({ ...this.broker.config, isMaster: true }));
  }
}

export interface ProcNode {
  configPath: string;
  port: number;
  host: string;
  child: ChildBroker;
}

/** Rewrites `isMaster` in the broker's config file. */
export function setMaster(node: ProcNode, isMaster: boolean): void {
  const config = JSON.parse(readFileSync(node.configPath, "utf8"));
  config.isMaster = isMaster;
  writeFileSync(node.configPath, JSON.stringify(config));
}

/** The operator's failover step: isMaster true in the file, SIGUSR2, wait for the log line. */
export async function promoteProcess(node: ProcNode): Promise<void> {
  setMaster(node, true);
  const before = node.child.output().split("promoted to master").length;
  node.child.proc.kill("SIGUSR2");
  await waitFor(() => node.child.output().split("promoted to master").length > before, 3000, "promoted to master logged");
}


/** Resolves once every host of `mq` is connected. */
export async function allConnected(mq: Client, timeoutMs = 3000): Promise<void> {
  await waitFor(() => mq.status().every((s) => s.connected), timeoutMs, "every host connected");
}

export const codes = (errors: KittenError[]) => errors.map((e) => e.code);
export const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);
export const numbers = (got: Received[]) => got.map((r) => (r.message as { n: number }).n);
export const distinct = (got: Received[]) => new Set(numbers(got));

/**
 * Sends `send(0)`, `send(1)`, … keeping `window` of them unconfirmed, until `stop()`: a new send
 * goes out each time one settles. Confirmed numbers and rejection codes are collected.
 */
export function publishLoop(send: (n: number) => Promise<unknown>, window: number) {
  const confirmed = new Set<number>();
  const rejected: string[] = [];
  let sent = 0;
  let pending = 0;
  let publishing = true;
  let room: (() => void) | null = null;
  const loop = (async () => {
    while (publishing) {
      while (publishing && pending < window) {
        const n = sent++;
        pending++;
        send(n).then(() => confirmed.add(n), (error: KittenError) => rejected.push(error.code)).finally(() => {
          pending--;
          room?.();
        });
      }
      if (publishing) await new Promise<void>((resolve) => (room = resolve)); // until a send settles
      room = null;
    }
  })();
  return {
    confirmed,
    rejected,
    get sent() {
      return sent;
    },
    get pending() {
      return pending;
    },
    /** Sends no more; resolves once the loop has ended (sends in flight may still settle). */
    async stop(): Promise<void> {
      publishing = false;
      room?.();
      await loop;
    },
  };
}

export interface ClusterFixture {
  cleanup: Cleanup;
  temps: TempDirs;
  /** `count` brokers in process; the first is master. `overrides` apply to all (durability memory unless given). */
  cluster(count: number, overrides?: Record<string, unknown>): Node[];
  /** A connected client of every host given; errors (FENCED, TWO_MASTERS…) and 'master' events are collected. */
  clusterClient(
    hosts: string[],
    options?: Record<string, unknown>,
  ): Promise<{ mq: Client; errors: KittenError[]; masters: { host: string; epoch: number }[] }>;
  /** `count` subprocess brokers in fsync mode on fixed ports; the first is master. */
  spawnCluster(count: number): Promise<ProcNode[]>;
  /** A broker in process of this fixture (stopped after each test). */
  node(name: string, dir: string, overrides: Record<string, unknown>): Node;
  /** A TCP relay to `port`; `cut()` drops every link through it (a partition of those clients only). */
  relay(port: number): Promise<{ host: string; cut(): void }>;
}

/** The fixture of one test file; registers the `afterEach` that stops and removes what it made. */
export function clusterFixture(): ClusterFixture {
  const cleanup = new Cleanup();
  const nodes: Node[] = [];
  const children: ChildBroker[] = [];
  const temps = new TempDirs();
  afterEach(async () => {
    await cleanup.run(); // clients first
    for (const node of nodes.splice(0)) await node.stop().catch(() => {});
    for (const child of children.splice(0)) if (child.proc.exitCode === null && !child.proc.killed) await kill9(child);
    temps.removeAll();
  });
  function cluster(count: number, overrides: Record<string, unknown> = {}): Node[] {
    const root = temps.make("kitten-cluster-");
    return Array.from({ length: count }, (_, i) => {
      const node = new Node(`broker-${i}`, join(root, `b${i}`), {
        durability: "memory",
        prefetch: 1000,
        maxItemsInQueue: 100_000,
        ...overrides,
        isMaster: i === 0,
      });
      nodes.push(node);
      return node.start();
    });
  }

  async function clusterClient(
    hosts: string[],
    options: Record<string, unknown> = {},
  ): Promise<{ mq: Client; errors: KittenError[]; masters: { host: string; epoch: number }[] }> {
    const mq = new Client();
    const errors: KittenError[] = [];
    const masters: { host: string; epoch: number }[] = [];
    mq.on("error", (error: KittenError) => errors.push(error));
    mq.on("master", (master: { host: string; epoch: number }) => masters.push(master));
    cleanup.add(mq);
    await mq.connect(clientOptions({ host: hosts[0]! }, { hosts, reconnectDelayMs: 10, maxReconnectDelayMs: 50, ...options }));
    return { mq, errors, masters };
  }

  async function spawnCluster(count: number): Promise<ProcNode[]> {
    const root = temps.make("kitten-cluster-proc-");
    const configs = await Promise.all(range(0, count).map(async (i) => {
      const port = await freePort();
      const configPath = writeBrokerConfig(join(root, `b${i}`), {
        socketServer: { port },
        isMaster: i === 0,
        durability: "fsync",
        prefetch: 1000,
        maxItemsInQueue: 1_000_000,
        logLevel: 2, // "promoted to master" is an info line
      });
      return { configPath, port };
    }));
    return await Promise.all(configs.map(async ({ configPath, port }) => {
      const child = await spawnBroker(configPath);
      children.push(child);
      return { configPath, port, host: child.host, child };
    }));
  }

  async function relay(port: number): Promise<{ host: string; cut(): void }> {
    const made = await startRelay(port);
    cleanup.defer(() => made.close());
    return { host: made.host("broker-1"), cut: made.cut };
  }

  function node(name: string, dir: string, overrides: Record<string, unknown>): Node {
    const made = new Node(name, dir, overrides);
    nodes.push(made);
    return made;
  }

  return { cleanup, temps, cluster, clusterClient, spawnCluster, node, relay };
}
