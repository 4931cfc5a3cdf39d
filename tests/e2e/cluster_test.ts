/**
 * Several brokers: three brokers on loopback, one master and two slaves.
 *
 * - steady state: only the master delivers; the slaves keep the same messages and their depth
 *   follows the acks (mirrored by the client) back to 0; a send is settled by the master only;
 * - kill -9 of the master (subprocess brokers, fsync) mid-stream, promotion of a slave by
 *   rewriting its config and SIGUSR2: no confirmed message lost (duplicates counted);
 * - a dead host (closed port, or a port that accepts and never answers) at client start;
 * - a broker restarted while clients run;
 * - the fenced old master, and two masters with the same epoch.
 *
 * In-process brokers keep their folder across a restart (same port, same store), so "the same
 * broker comes back"; subprocess brokers (tests/helpers/crash.ts) are the ones killed with
 * SIGKILL. Every broker of the cluster has the serviceId "broker-1" (the JWT audience); the host
 * strings differ by port.
 */
import { afterEach, expect, it } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { Client, type KittenError } from "../../mod.ts";
import { Cleanup, clientOptions, freePort, type Received, recorder, sleep, waitFor } from "../helpers/broker.ts";
import { type ChildBroker, kill9, spawnBroker, writeBrokerConfig } from "../helpers/crash.ts";
import { TempDirs } from "../helpers/temp_dir.ts";
import { parseConfig } from "../../src/server/config/config.ts";
import { type Logger, memoryLogger } from "../../src/server/log.ts";
import { type BrokerServer, startBroker } from "../../src/server/server.ts";
import type { Broker } from "../../src/server/broker.ts";
import { MemoryStore } from "../../src/server/store/memory_store.ts";
import type { Store, StoredMessage } from "../../src/server/store/store.ts";

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

// ── in-process brokers that can stop and come back (same port, same folder, same store) ──────

class Node {
  server: BrokerServer | null = null;
  port = 0;
  /** One logger for every life of this broker: lines accumulate across restarts. */
  readonly logger: Logger & { lines: string[] } = memoryLogger();

  constructor(
    readonly name: string,
    readonly dir: string,
    public overrides: Record<string, unknown>,
    /** A store of our own (default: the one the config asks for). */
    public makeStore?: () => Store,
  ) {}

  start(): this {
    if (this.server) throw new Error(`${this.name} already runs`);
    const config = parseConfig({
      isManagementInterface: false,
      registeredClientsPath: join(this.dir, "clients"),
      dataDirectory: join(this.dir, "data"),
      ...this.overrides,
      socketServer: { port: this.port, host: "127.0.0.1" },
    });
    this.server = startBroker(config, { logger: this.logger, store: this.makeStore?.() });
    this.port = this.server.port;
    return this;
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = null;
    await server?.stop();
  }

  get broker(): Broker {
    if (!this.server) throw new Error(`${this.name} is not running`);
    return this.server.broker;
  }

  get host(): string {
    return `127.0.0.1:${this.port}@broker-1`;
  }

  /** Messages with a live copy in `queue` on this broker. */
  live(queue: string): number {
    return this.broker.queues.get(queue)?.live ?? 0;
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

/** `count` brokers; the first is master. `overrides` apply to all (durability memory unless given). */
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

/** A connected client of every host given; errors (FENCED, TWO_MASTERS…) are collected. */
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

/** Resolves once every host of `mq` is connected. */
async function allConnected(mq: Client, timeoutMs = 3000): Promise<void> {
  await waitFor(() => mq.status().every((s) => s.connected), timeoutMs, "every host connected");
}

const codes = (errors: KittenError[]) => errors.map((e) => e.code);
const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);
const numbers = (got: Received[]) => got.map((r) => (r.message as { n: number }).n);
const distinct = (got: Received[]) => new Set(numbers(got));

// ── steady state ─────────────────────────────────────────────────────────────────────────────

it("cluster: steady state — only the master delivers; the slaves' depth follows acks back to 0", async () => {
  const [a, b, c] = cluster(3);
  const hosts = [a!.host, b!.host, c!.host];
  const { mq: consumer } = await clusterClient(hosts);
  const { mq: publisher } = await clusterClient(hosts);
  await allConnected(consumer);
  await allConnected(publisher);
  expect(consumer.status()).toEqual([
    { host: a!.host, connected: true, role: "master", epoch: 0, master: true },
    { host: b!.host, connected: true, role: "slave", epoch: 0, master: false },
    { host: c!.host, connected: true, role: "slave", epoch: 0, master: false },
  ]);

  const got: Received[] = [];
  const sub = consumer.consume("steady/v1/*", recorder(got, { ack: false }), { prefetch: 100 });
  await sub.ready;
  await Promise.all(range(0, 20).map((n) => publisher.send("steady/v1/x", { n })));
  await waitFor(() => got.length === 20);
  // Every broker keeps the 20 messages; only the master delivered them.
  for (const node of [a!, b!, c!]) await waitFor(() => node.live("steady/v1") === 20, 2000, `${node.name} holds 20`);
  expect([a!.deliveries, b!.deliveries, c!.deliveries]).toEqual([20, 0, 0]);

  // Half acked: the slaves drop the same half.
  for (const r of got.slice(0, 10)) r.done();
  for (const node of [a!, b!, c!]) await waitFor(() => node.live("steady/v1") === 10, 2000, `${node.name} holds 10`);
  for (const r of got.slice(10)) r.done();
  for (const node of [a!, b!, c!]) await waitFor(() => node.live("steady/v1") === 0, 2000, `${node.name} holds 0`);

  // Streaming, acked at once: the slaves end at 0 too; still only the master delivers.
  const streamed: Received[] = [];
  await consumer.consume("stream/v1/*", recorder(streamed), { prefetch: 100 }).ready;
  await Promise.all(range(0, 500).map((n) => publisher.send(`stream/v1/${n % 3}`, { n })));
  await waitFor(() => distinct(streamed).size === 500, 4000);
  for (const node of [a!, b!, c!]) await waitFor(() => node.live("stream/v1") === 0, 2000, `${node.name} stream depth 0`);
  expect(b!.deliveries + c!.deliveries).toBe(0);
  expect(streamed.length).toBe(500); // no duplicates in a steady state
});

it("cluster: listeners' auto-acks are mirrored too (each listening clientId has its own copy on the slaves)", async () => {
  const [a, b, c] = cluster(3);
  const hosts = [a!.host, b!.host, c!.host];
  const heard: Received[][] = [[], []];
  const listeners = await Promise.all([0, 1].map(() => clusterClient(hosts)));
  for (const [i, { mq }] of listeners.entries()) {
    await allConnected(mq);
    await mq.listen("fan/v1/*", (error, message, info) => {
      if (!error) heard[i]!.push({ message, info: info!, done: () => {}, at: 0 });
    }).ready;
  }
  const { mq: publisher } = await clusterClient(hosts);
  await allConnected(publisher);
  await Promise.all(range(0, 100).map((n) => publisher.send("fan/v1/x", { n })));
  await waitFor(() => heard[0]!.length === 100 && heard[1]!.length === 100);
  for (const node of [a!, b!, c!]) await waitFor(() => node.live("fan/v1") === 0, 2000, `${node.name} fan depth 0`);
  expect(b!.deliveries + c!.deliveries).toBe(0);
});

it("cluster: a send is settled by the master only — a client of the slaves alone keeps it pending until one is promoted", async () => {
  const [a, b, c] = cluster(3);
  const { mq, masters } = await clusterClient([b!.host, c!.host]);
  await allConnected(mq);
  let settled = null as string | null;
  const sent = mq.send("pending/v1/x", { n: 1 }).then(() => (settled = "confirmed"), (e) => (settled = `rejected ${e.code}`));
  // Both slaves stored it ("stored as slave"), which does not settle the send.
  await waitFor(() => b!.live("pending/v1") === 1 && c!.live("pending/v1") === 1);
  await sleep(300);
  expect(settled).toBeNull();
  expect(a!.live("pending/v1")).toBe(0); // the client does not know the master
  expect(mq.status().map((s) => s.master)).toEqual([false, false]);

  // A promoted slave confirms it (the client resends unconfirmed sends to a new master).
  b!.promote();
  await sent;
  expect(settled).toBe("confirmed");
  expect(masters).toEqual([{ host: b!.host, epoch: 1 }]);
  expect(mq.status().find((s) => s.host === b!.host)).toEqual({ host: b!.host, connected: true, role: "master", epoch: 1, master: true });
  expect(b!.live("pending/v1")).toBe(1); // confirmed once, stored once (the resend was a duplicate)
});

/** A store whose commits take `delayMs` (a slave on a slow disk, or busy). */
class SlowStore extends MemoryStore {
  constructor(readonly delayMs: number) {
    super();
  }
  override append(message: StoredMessage): Promise<void> {
    super.append(message);
    return sleep(this.delayMs);
  }
}

it("cluster: a slave that stores more slowly than the master delivers still drops the acked copies", async () => {
  // The master confirms and delivers from memory; the slaves' commits take 50 ms, so the acks
  // the client mirrors reach them before the messages are in their queues.
  const [a, b, c] = cluster(3, { durability: "fsync" });
  await a!.stop();
  a!.overrides = { ...a!.overrides, durability: "memory" };
  a!.start();
  for (const slave of [b!, c!]) {
    await slave.stop();
    slave.makeStore = () => new SlowStore(50);
    slave.start();
  }
  const hosts = [a!.host, b!.host, c!.host];
  const { mq: consumer } = await clusterClient(hosts);
  const { mq: publisher } = await clusterClient(hosts);
  await allConnected(consumer);
  await allConnected(publisher);
  const got: Received[] = [];
  await consumer.consume("race/v1/*", recorder(got), { prefetch: 1000 }).ready;
  await Promise.all(range(0, 200).map((n) => publisher.send("race/v1/x", { n })));
  await waitFor(() => distinct(got).size === 200, 4000);
  await sleep(300); // the slaves' last commits
  // Otherwise each slave keeps these copies for ever and delivers them again once promoted.
  expect({ a: a!.live("race/v1"), b: b!.live("race/v1"), c: c!.live("race/v1") }).toEqual({ a: 0, b: 0, c: 0 });
});

/** A TCP relay to `port`; `cut()` drops every link through it (a partition of those clients only). */
async function relay(port: number): Promise<{ host: string; cut(): void }> {
  const sockets: Socket[] = [];
  const server = createServer((inbound) => {
    const outbound = connect(port, "127.0.0.1");
    sockets.push(inbound, outbound);
    inbound.on("error", () => {});
    outbound.on("error", () => {});
    inbound.pipe(outbound);
    outbound.pipe(inbound);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanup.defer(() => {
    for (const socket of sockets) socket.destroy();
    return new Promise((resolve) => server.close(() => resolve(undefined)));
  });
  return {
    host: `127.0.0.1:${(server.address() as { port: number }).port}@broker-1`,
    cut: () => {
      for (const socket of sockets.splice(0)) socket.destroy();
    },
  };
}

it("cluster: a slave keeps every confirmed message when a consumer's link to it drops (no overflow drop)", async () => {
  // maxItemsInQueue bounds messages waiting for a recipient. The master still serves the
  // consumer (49 ready behind 1 in flight, none waiting); the slave must not drop what the master
  // will deliver, or a failover then loses it.
  const [a, b] = cluster(2, { maxItemsInQueue: 10, prefetch: 1 });
  const toB = await relay(b!.port);
  const { mq: consumer } = await clusterClient([a!.host, toB.host], { reconnectDelayMs: 5000, maxReconnectDelayMs: 5000 });
  await allConnected(consumer);
  const held: Received[] = [];
  await consumer.consume("keep/v1/*", recorder(held, { ack: false }), { prefetch: 1 }).ready;
  const { mq: publisher } = await clusterClient([a!.host, b!.host]);
  await allConnected(publisher);
  await Promise.all(range(0, 50).map((n) => publisher.send("keep/v1/x", { n })));
  await waitFor(() => b!.live("keep/v1") === 50);
  toB.cut(); // the consumer↔slave link drops; the consumer↔master link stays
  await waitFor(() => !consumer.status()[1]!.connected);
  await sleep(100);
  expect(a!.live("keep/v1")).toBe(50);
  expect(b!.broker.queues.get("keep/v1")!.counters.dropped).toBe(0);
  expect(b!.live("keep/v1")).toBe(50);
});

// ── kill -9 of the master, promotion of a slave ─────────────────────────────────────────────

interface ProcNode {
  configPath: string;
  port: number;
  host: string;
  child: ChildBroker;
}

/** Three subprocess brokers in fsync mode on fixed ports; the first is master. */
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

/** Rewrites `isMaster` in the broker's config file. */
function setMaster(node: ProcNode, isMaster: boolean): void {
  const config = JSON.parse(readFileSync(node.configPath, "utf8"));
  config.isMaster = isMaster;
  writeFileSync(node.configPath, JSON.stringify(config));
}

/** The operator's failover step: isMaster true in the file, SIGUSR2, wait for the log line. */
async function promoteProcess(node: ProcNode): Promise<void> {
  setMaster(node, true);
  const before = node.child.output().split("promoted to master").length;
  node.child.proc.kill("SIGUSR2");
  await waitFor(() => node.child.output().split("promoted to master").length > before, 3000, "promoted to master logged");
}

it("cluster: kill -9 of the master mid-stream, a slave promoted: no confirmed message lost", async () => {
  const [a, b, c] = await spawnCluster(3);
  const hosts = [a!.host, b!.host, c!.host];
  const { mq: publisher } = await clusterClient(hosts, { maxPendingMessages: 10_000 });
  const { mq: consumer } = await clusterClient(hosts);
  await allConnected(publisher);
  await allConnected(consumer);

  const received = new Map<number, number>();
  await consumer.consume("failover/v1/*", (error, message, done) => {
    if (error) return;
    const n = (message as { n: number }).n;
    received.set(n, (received.get(n) ?? 0) + 1);
    done();
  }, { prefetch: 200 }).ready;

  const confirmed = new Set<number>();
  const rejected: string[] = [];
  let sent = 0;
  let pending = 0;
  let publishing = true;
  const loop = (async () => {
    while (publishing) {
      while (publishing && pending < 100) {
        const n = sent++;
        pending++;
        publisher.send(`failover/v1/${n % 4}`, { n }).then(
          () => confirmed.add(n),
          (error: KittenError) => rejected.push(error.code),
        ).finally(() => pending--);
      }
      await sleep(1);
    }
  })();

  await waitFor(() => confirmed.size >= 500, 4000, "500 confirmed before the kill");
  const atKill = confirmed.size;
  await kill9(a!.child);
  await promoteProcess(b!);
  await waitFor(() => publisher.status().find((s) => s.host === b!.host)?.master === true, 2000, "the publisher follows b");
  await waitFor(() => confirmed.size >= atKill + 500, 4000, "500 more confirmed by the new master");
  publishing = false;
  await loop;
  await waitFor(() => pending === 0, 4000, "every send settled");
  await waitFor(() => [...confirmed].every((n) => received.has(n)), 4000, "every confirmed message delivered").catch(() => {});
  await sleep(200); // redeliveries still on their way are counted as duplicates

  const lost = [...confirmed].filter((n) => !received.has(n));
  let duplicates = 0;
  for (const count of received.values()) duplicates += count - 1;
  console.log(`kill -9 failover: confirmed ${confirmed.size}, lost ${lost.length}, duplicates ${duplicates}`);
  expect(rejected).toEqual([]);
  expect(lost.slice(0, 20)).toEqual([]);
  expect(c!.child.output()).not.toContain("promoted");
}, 8_000);

// ── dead hosts ───────────────────────────────────────────────────────────────────────────────

it("cluster: a dead host at client start (closed port, or a port that never answers) blocks nothing", async () => {
  const [a, b] = cluster(2);
  const closedPort = await freePort();
  // A port that accepts the connection and then says nothing: the hello is never answered.
  const sockets: Socket[] = [];
  const silent: Server = createServer((socket) => sockets.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  cleanup.defer(() => {
    for (const socket of sockets) socket.destroy();
    return new Promise((resolve) => silent.close(resolve));
  });
  const silentPort = (silent.address() as { port: number }).port;
  const dead = `127.0.0.1:${closedPort}@broker-1`;
  const mute = `127.0.0.1:${silentPort}@broker-1`;

  const started = performance.now();
  const { mq, errors } = await clusterClient([dead, mute, a!.host, b!.host]);
  expect(performance.now() - started).toBeLessThan(1500);
  const got: Received[] = [];
  await mq.consume("dead/v1/*", recorder(got)).ready;
  await Promise.all(range(0, 10).map((n) => mq.send("dead/v1/x", { n })));
  await waitFor(() => got.length === 10);
  await waitFor(() => mq.status().filter((s) => s.connected).length === 2);
  expect(mq.status().map((s) => [s.connected, s.master])).toEqual([[false, false], [false, false], [true, true], [true, false]]);
  expect(codes(errors).filter((code) => code === "FENCED" || code === "TWO_MASTERS")).toEqual([]);

  // The dead host comes up (a slave): the client's reconnect loop joins it, and it stores new sends.
  const late = new Node("late", temps.make("kitten-cluster-late-"), { durability: "memory", isMaster: false });
  late.port = closedPort;
  nodes.push(late);
  late.start();
  await waitFor(() => mq.status()[0]!.connected, 3000, "the late host joined");
  await mq.send("dead/v1/x", { n: 10 });
  await waitFor(() => got.length === 11);
  await waitFor(() => late.broker.stats.counters.received >= 1); // it stored the new send…
  await waitFor(() => late.live("dead/v1") === 0); // …and dropped it when the ack was mirrored
  expect(late.deliveries).toBe(0);
});

// ── a broker restarted while clients run ────────────────────────────────────────────────────

it("cluster: the master and a slave restarted while clients run — the clients reconnect and re-register, nothing lost", async () => {
  const [a, b, c] = cluster(3, { durability: "fsync" });
  const hosts = [a!.host, b!.host, c!.host];
  const { mq: publisher } = await clusterClient(hosts);
  const { mq: consumer } = await clusterClient(hosts);
  await allConnected(publisher);
  await allConnected(consumer);
  const received = new Map<number, number>();
  await consumer.consume("restart/v1/*", (error, message, done) => {
    if (error) return;
    const n = (message as { n: number }).n;
    received.set(n, (received.get(n) ?? 0) + 1);
    done();
  }, { prefetch: 50 }).ready;

  const confirmed = new Set<number>();
  const rejected: string[] = [];
  let sent = 0;
  let pending = 0;
  let publishing = true;
  const loop = (async () => {
    while (publishing) {
      while (publishing && pending < 50) {
        const n = sent++;
        pending++;
        publisher.send(`restart/v1/${n % 2}`, { n }).then(() => confirmed.add(n), (e: KittenError) => rejected.push(e.code))
          .finally(() => pending--);
      }
      await sleep(1);
    }
  })();

  // The master goes away and comes back on the same port with the same store.
  await waitFor(() => confirmed.size >= 200, 3000);
  await a!.stop();
  await sleep(100);
  a!.start();
  await waitFor(() => a!.deliveries > 50, 3000, "the consumer re-registered on the master");
  // A slave goes away and comes back.
  const atSlave = confirmed.size;
  await b!.stop();
  await sleep(100);
  b!.start();
  await allConnected(publisher);
  await allConnected(consumer);
  await waitFor(() => confirmed.size >= atSlave + 200, 3000);
  publishing = false;
  await loop;
  await waitFor(() => pending === 0, 3000);
  await waitFor(() => [...confirmed].every((n) => received.has(n)), 3000).catch(() => {});
  const lost = [...confirmed].filter((n) => !received.has(n));
  expect(rejected).toEqual([]);
  expect(lost).toEqual([]);
  expect(b!.deliveries).toBe(0);
  // The restarted slave holds the messages sent after it came back only until they are acked.
  await waitFor(() => c!.live("restart/v1") === 0, 2000, "c depth 0");
}, 8_000);

it("cluster: a slave that was away while the master confirmed messages, then promoted, still delivers them", async () => {
  const [a, b, c] = cluster(3, { durability: "fsync" });
  const hosts = [a!.host, b!.host, c!.host];
  const { mq: publisher } = await clusterClient(hosts);
  await allConnected(publisher);
  await b!.stop(); // b restarts (upgrade, crash)…
  await Promise.all(range(0, 5).map((n) => publisher.send("away/v1/x", { n }))); // …while a confirms 5
  b!.start();
  await allConnected(publisher);
  await Promise.all(range(5, 10).map((n) => publisher.send("away/v1/x", { n })));
  await a!.stop(); // then the master dies and the operator promotes b
  b!.promote();
  const { mq: consumer } = await clusterClient(hosts);
  const got: Received[] = [];
  await consumer.consume("away/v1/*", recorder(got)).ready;
  await waitFor(() => got.length >= 5);
  await sleep(200);
  expect(numbers(got).toSorted((x, y) => x - y)).toEqual(range(0, 10)); // every confirmed message
});

// An id holding "|" once broke the client's record of acks (it split a joined key on "|").
for (const id of ["x", "x|y"]) {
it(`cluster: a slave that was away while messages were acked drops them once it is back (id "${id}")`, async () => {
  const [a, b, c] = cluster(3, { durability: "fsync" });
  const hosts = [a!.host, b!.host, c!.host];
  const { mq: publisher } = await clusterClient(hosts);
  await allConnected(publisher);
  await Promise.all(range(0, 5).map((n) => publisher.send(`gone/v1/${id}`, { n })));
  await waitFor(() => b!.live("gone/v1") === 5);
  await b!.stop();
  const { mq: consumer } = await clusterClient(hosts);
  await waitFor(() => consumer.status().filter((s) => s.connected).length === 2, 2000, "a and c connected");
  const got: Received[] = [];
  await consumer.consume("gone/v1/*", recorder(got)).ready;
  await waitFor(() => got.length === 5);
  await waitFor(() => a!.live("gone/v1") === 0 && c!.live("gone/v1") === 0);
  b!.start(); // it restores the five from its store; they were acked while it was away
  await allConnected(consumer);
  await allConnected(publisher);
  await sleep(300);
  // Otherwise b keeps them for ever (its depth only grows with each restart) and delivers them
  // again when it is promoted.
  expect(b!.live("gone/v1")).toBe(0);
});
}

it("cluster: a planned switchover — the demoted master drops the copies acked on the new one", async () => {
  const [a, b] = cluster(2);
  const { mq: publisher } = await clusterClient([a!.host, b!.host]);
  await allConnected(publisher);
  await Promise.all(range(0, 5).map((n) => publisher.send("switch/v1/x", { n })));
  await waitFor(() => b!.live("switch/v1") === 5);
  // The operator demotes a, then promotes b (both reloads).
  a!.broker.reload(parseConfig({ ...a!.broker.config, isMaster: false }));
  b!.promote();
  const { mq: consumer } = await clusterClient([a!.host, b!.host]);
  await allConnected(consumer);
  const got: Received[] = [];
  await consumer.consume("switch/v1/*", recorder(got)).ready;
  await waitFor(() => got.length === 5);
  await waitFor(() => b!.live("switch/v1") === 0);
  await sleep(200);
  expect(a!.deliveries).toBe(0);
  // Otherwise a keeps them for ever, and delivers them again when it is master again.
  expect(a!.live("switch/v1")).toBe(0);
});

// ── fencing ──────────────────────────────────────────────────────────────────────────────────

it("cluster: an old master that comes back still claiming master is fenced — it delivers nothing, the new one keeps delivering", async () => {
  const [a, b, c] = cluster(3, { durability: "fsync" });
  const hosts = [a!.host, b!.host, c!.host];
  const first = await clusterClient(hosts);
  await allConnected(first.mq);
  // Five messages nobody consumes yet: every broker stores them, a included.
  await Promise.all(range(0, 5).map((n) => first.mq.send("fence/v1/x", { n })));
  for (const node of [a!, b!, c!]) await waitFor(() => node.live("fence/v1") === 5);
  await first.mq.disconnect();

  await a!.stop(); // the master goes away (crash, partition)…
  b!.promote(); // …and the operator promotes b: epoch 1
  expect(b!.broker.epoch).toBe(1);
  const { mq: consumer, errors, masters } = await clusterClient(hosts);
  const got: Received[] = [];
  await consumer.consume("fence/v1/*", recorder(got)).ready;
  await waitFor(() => got.length === 5);
  expect(masters.at(-1)).toEqual({ host: b!.host, epoch: 1 });

  // a comes back as it was: isMaster true, epoch 0, its store still holding the five messages
  // (their acks were mirrored while it was away). The consumer is the only client to reach it:
  // it must tell a (FENCE) before a hands it anything.
  a!.start();
  expect(a!.broker.epoch).toBe(0);
  expect(a!.live("fence/v1")).toBe(5);
  await waitFor(() => codes(errors).includes("FENCED"), 3000, "the client reports FENCED");
  await waitFor(() => a!.logger.lines.some((line) => line.includes("fenced")), 2000, 'a logs "fenced"');
  await waitFor(() => consumer.status()[0]!.role === "slave", 2000, "a now says slave");
  expect(consumer.status()[0]).toMatchObject({ host: a!.host, connected: true, master: false });

  // b keeps delivering; a delivers nothing, not even the five messages it restored.
  const { mq: publisher } = await clusterClient(hosts);
  await allConnected(publisher);
  await Promise.all(range(5, 15).map((n) => publisher.send("fence/v1/x", { n })));
  await waitFor(() => distinct(got).size === 15);
  await sleep(100);
  expect(b!.deliveries).toBeGreaterThanOrEqual(15);
  expect(c!.deliveries).toBe(0);
  expect(numbers(got).toSorted((x, y) => x - y)).toEqual(range(0, 15));
  expect(a!.deliveries).toBe(0);
});

it("cluster: after two failovers the epoch keeps rising — the first promoted master, back still claiming master, is fenced", async () => {
  const [a, b, c] = cluster(3, { durability: "fsync" });
  const hosts = [a!.host, b!.host, c!.host];
  const { mq, errors } = await clusterClient(hosts);
  await allConnected(mq);
  const got: Received[] = [];
  await mq.consume("epoch/v1/*", recorder(got)).ready;

  await a!.stop();
  b!.promote(); // epoch 1
  await waitFor(() => mq.status()[1]!.master);
  await b!.stop();
  c!.promote(); // must be above every epoch the cluster has used: 2
  await waitFor(() => mq.status()[2]!.master);
  expect(c!.broker.epoch).toBeGreaterThan(1);

  b!.start(); // back, still isMaster true with epoch 1
  await waitFor(() => mq.status()[1]!.connected);
  await sleep(200);
  expect(codes(errors)).toContain("FENCED");
  expect(codes(errors)).not.toContain("TWO_MASTERS");
  await mq.send("epoch/v1/x", { n: 1 });
  await waitFor(() => got.length === 1);
  expect(b!.deliveries).toBe(0);
});

it("cluster: two masters with the same epoch are reported (TWO_MASTERS)", async () => {
  const [a, b] = cluster(2);
  b!.promote(); // epoch 1 on b…
  const [c] = cluster(1); // …and a fresh master c, also reaching epoch 1 by one promotion
  await c!.stop();
  c!.overrides = { ...c!.overrides, isMaster: false };
  c!.start();
  c!.promote();
  expect([b!.broker.epoch, c!.broker.epoch]).toEqual([1, 1]);
  const { mq, errors } = await clusterClient([a!.host, b!.host, c!.host]);
  await allConnected(mq);
  await waitFor(() => codes(errors).includes("TWO_MASTERS"), 2000, "TWO_MASTERS reported");
  const report = errors.find((e) => e.code === "TWO_MASTERS")!;
  expect(report.message).toContain(b!.host);
  expect(report.message).toContain(c!.host);
  // a (epoch 0) is below them: fenced.
  expect(codes(errors)).toContain("FENCED");
});

it("cluster: two masters with epoch 0 (both configured isMaster true) are reported (TWO_MASTERS)", async () => {
  const [a] = cluster(1);
  const [b] = cluster(1);
  const { errors } = await clusterClient([a!.host, b!.host]);
  await waitFor(() => codes(errors).includes("TWO_MASTERS"), 2000, "TWO_MASTERS reported");
});
