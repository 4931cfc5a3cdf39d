/**
 * Automatic failover on etcd (`cluster.etcd`), with real etcd servers started on loopback:
 * kill -9 of the master with no operator step; a master cut off from etcd (but not from its
 * clients) stepping down before another is elected; a three-node etcd cluster losing a node.
 */
import { afterEach, expect, it } from "bun:test";
import { join } from "node:path";
import { Client, type KittenError } from "../../mod.ts";
import { Cleanup, clientOptions, freePort, waitFor } from "../helpers/broker.ts";
import { type ChildBroker, kill9, spawnBroker, writeBrokerConfig } from "../helpers/crash.ts";
import { type EtcdCluster, startEtcd, startEtcdCluster } from "../helpers/etcd.ts";
import { TempDirs } from "../helpers/temp_dir.ts";
import { parseConfig } from "../../src/server/config/config.ts";
import { Logger } from "../../src/server/log.ts";
import { type BrokerServer, startBroker } from "../../src/server/server.ts";

const cleanup = new Cleanup();
const temps = new TempDirs();
const etcds: EtcdCluster[] = [];
const children: ChildBroker[] = [];
const servers: BrokerServer[] = [];

afterEach(async () => {
  await cleanup.run();
  for (const server of servers.splice(0)) await server.stop().catch(() => {});
  for (const child of children.splice(0)) if (child.proc.exitCode === null) await kill9(child);
  for (const etcd of etcds.splice(0)) await etcd.cleanup();
  temps.removeAll();
});

const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

async function etcdCluster(size: number): Promise<EtcdCluster> {
  const etcd = size === 1 ? await startEtcd() : await startEtcdCluster(size);
  etcds.push(etcd);
  return etcd;
}

async function client(hosts: string[]): Promise<Client> {
  const mq = new Client();
  mq.on("error", (_error: KittenError) => {}); // killed and stepped-down brokers are expected here
  cleanup.add(mq);
  await mq.connect(clientOptions({ host: hosts[0]! }, { hosts, reconnectDelayMs: 10, maxReconnectDelayMs: 50, maxPendingMessages: 100_000 }));
  return mq;
}

interface Spec {
  name: string;
  port: number;
  host: string;
  dir: string;
}

async function specs(count: number): Promise<Spec[]> {
  const root = temps.make("kitten-auto-");
  const list: Spec[] = [];
  for (let i = 0; i < count; i++) {
    const port = await freePort();
    list.push({ name: `b${i}`, port, host: `127.0.0.1:${port}@b${i}`, dir: join(root, `b${i}`) });
  }
  return list;
}

function brokerConfig(spec: Spec, all: Spec[], endpoints: string[], extra: Record<string, unknown> = {}) {
  return {
    serviceId: spec.name,
    isMaster: false, // ignored: etcd elects
    keysDirectory: join(spec.dir, "keys"),
    registeredClientsPath: join(spec.dir, "clients"),
    dataDirectory: join(spec.dir, "data"),
    durability: "fsync",
    prefetch: 1000,
    logLevel: 2,
    socketServer: { port: spec.port, host: "127.0.0.1" },
    cluster: {
      peers: all.filter((other) => other !== spec).map((other) => other.host),
      minInSyncReplicas: 2,
      etcd: { endpoints, leaseTtlSeconds: 2 },
    },
    ...extra,
  };
}

/** An in-process broker whose log lines carry the time they were written. */
function inProcess(spec: Spec, all: Spec[], endpoints: string[]): { server: BrokerServer; lines: [number, string][] } {
  const lines: [number, string][] = [];
  const logger = new Logger(2, (_level, line) => lines.push([Date.now(), line]));
  const server = startBroker(parseConfig({ ...brokerConfig(spec, all, endpoints), isManagementInterface: false }), { logger });
  servers.push(server);
  return { server, lines };
}

/** `error`, with what each broker process said last: a send that fails here is explained by them. */
function withBrokerLines(error: unknown): unknown {
  const tails = children.map((child, i) => {
    const state = child.proc.exitCode !== null ? `exited ${child.proc.exitCode}` : child.proc.signalCode ? `killed ${child.proc.signalCode}` : "running";
    return `broker ${i} (${state}):\n  ${child.output().trim().split("\n").slice(-15).join("\n  ")}`;
  });
  console.error(tails.join("\n"));
  return error;
}

const firstAt = (lines: [number, string][], what: string) => lines.find(([, line]) => line.includes(what))?.[0];

it("automatic failover: after kill -9 of the master, etcd elects an in-sync slave with no operator step, and nothing confirmed is lost", async () => {
  const etcd = await etcdCluster(1);
  const all = await specs(3);
  for (const spec of all) {
    children.push(await spawnBroker(writeBrokerConfig(spec.dir, brokerConfig(spec, all, etcd.endpoints)), 20_000));
  }
  /** The running broker whose last role change was its election. */
  const masterIndex = () =>
    children.findIndex((child) => {
      if (child.proc.exitCode !== null || child.proc.signalCode !== null) return false;
      const roles = child.output().split("\n").filter((line) => /\] (elected master through etcd|stepped down to slave);/.test(line));
      return roles.at(-1)?.includes("elected master through etcd;") ?? false;
    });
  await waitFor(() => masterIndex() >= 0, 20_000, "a master elected");
  const publisher = await client(all.map((s) => s.host));
  const confirmed = new Set<number>();
  // The master refuses sends until a slave is in sync (minInSyncReplicas 2): retry until confirmed.
  const sendUntilConfirmed = async (n: number) => {
    for (;;) {
      try {
        await publisher.send(`auto/v1/${n % 3}`, { n });
        confirmed.add(n);
        return;
      } catch (error) {
        if ((error as KittenError).code !== "NOT_ENOUGH_REPLICAS") throw withBrokerLines(error);
        await Bun.sleep(20);
      }
    }
  };
  await Promise.all(range(0, 300).map(sendUntilConfirmed));

  const killed = masterIndex();
  await kill9(children[killed]!);
  const killedAt = Date.now();
  await waitFor(() => masterIndex() >= 0 && masterIndex() !== killed, 15_000, "another broker elected");
  await Promise.all(range(300, 600).map(sendUntilConfirmed));
  const failoverMs = Date.now() - killedAt;
  expect(failoverMs).toBeLessThan(15_000); // a generous bound: the figure itself is measured by scripts/failover.ts --auto

  const consumer = await client(all.filter((_, i) => i !== killed).map((s) => s.host));
  const received = new Set<number>();
  await consumer.consume("auto/v1/*", (error, message, done) => {
    if (error) return;
    received.add((message as { n: number }).n);
    done();
  }, { prefetch: 1000 }).ready;
  await waitFor(() => [...confirmed].every((n) => received.has(n)), 20_000, "every confirmed message delivered");
  expect(confirmed.size).toBe(600);
}, 90_000);

it("automatic failover: a master cut off from etcd but not from its clients steps down before another broker is elected", async () => {
  const etcd = await etcdCluster(3);
  const all = await specs(2);
  const [nodeA, nodeB, nodeC] = etcd.nodes;
  // The first broker reaches etcd only through node A; the second through B and C.
  const first = inProcess(all[0]!, all, [nodeA!.clientUrl]);
  await waitFor(() => first.server.broker.isMaster, 15_000, "the first broker elected");
  const second = inProcess(all[1]!, all, [nodeB!.clientUrl, nodeC!.clientUrl]);
  await waitFor(() => second.server.broker.cluster.status().upstream?.state === "in-sync", 15_000, "the second in sync");
  expect(second.server.broker.isMaster).toBe(false);

  nodeA!.pause(); // the master's only etcd node hangs; B and C keep a quorum
  try {
    await waitFor(() => second.server.broker.isMaster, 20_000, "the second broker elected");
    expect(first.server.broker.isMaster).toBe(false);
    const steppedDown = firstAt(first.lines, "stepped down to slave");
    const elected = firstAt(second.lines, "elected master through etcd;");
    expect(steppedDown).toBeDefined();
    expect(elected).toBeDefined();
    // No two masters deliver at once: the old one stopped before the new one started.
    expect(steppedDown!).toBeLessThan(elected!);
  } finally {
    nodeA!.resume();
  }
}, 90_000);

it("automatic failover: a three-node etcd cluster losing one node keeps its master, and sends are still confirmed", async () => {
  const etcd = await etcdCluster(3);
  const all = await specs(2);
  const a = inProcess(all[0]!, all, etcd.endpoints);
  const b = inProcess(all[1]!, all, etcd.endpoints);
  const master = () => [a, b].find((x) => x.server.broker.isMaster);
  await waitFor(() => master() !== undefined, 15_000, "a master elected");
  await waitFor(() => master()!.server.broker.cluster.status().inSync.length === 2, 15_000, "the slave in sync");
  const publisher = await client(all.map((s) => s.host));
  await Promise.all(range(0, 200).map((n) => publisher.send("three/v1/x", { n })));

  const leader = await etcd.raftLeader();
  await leader.kill(); // etcd's own leader: the hardest node to lose
  const before = master();
  await Promise.all(range(200, 400).map((n) => publisher.send("three/v1/x", { n })));
  expect(master()).toBe(before); // the lease survived the loss of one etcd node
  const stepDowns = [...a.lines, ...b.lines].filter(([, line]) => line.includes("stepped down to slave"));
  expect(stepDowns).toEqual([]);
  expect(master()!.server.broker.queues.get("three/v1")?.live).toBe(400);
}, 90_000);
