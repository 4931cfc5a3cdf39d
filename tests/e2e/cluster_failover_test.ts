/**
 * Several brokers end to end, when brokers go away: kill -9 of the master mid-stream and promotion
 * of a slave (subprocess brokers, fsync), a dead host at client start, brokers restarted while
 * clients run, slaves that were away, and a planned switchover. Setup: tests/helpers/cluster.ts.
 */
import { expect, it } from "bun:test";
import { createServer, type Server, type Socket } from "node:net";
import { freePort, type Received, recorder, waitFor } from "../helpers/broker.ts";
import {
  allConnected,
  clusterFixture,
  codes,
  numbers,
  promoteProcess,
  publishLoop,
  range,
} from "../helpers/cluster.ts";
import { kill9 } from "../helpers/crash.ts";
import { parseConfig } from "../../src/server/config/config.ts";

const { cleanup, temps, cluster, clusterClient, spawnCluster, node } = clusterFixture();

// ── kill -9 of the master, promotion of a slave ─────────────────────────────────────────────

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

  const publishing = publishLoop((n) => publisher.send(`failover/v1/${n % 4}`, { n }), 100);
  const { confirmed, rejected } = publishing;

  await waitFor(() => confirmed.size >= 500, 4000, "500 confirmed before the kill");
  const atKill = confirmed.size;
  await kill9(a!.child);
  await promoteProcess(b!);
  await waitFor(() => publisher.status().find((s) => s.host === b!.host)?.master === true, 2000, "the publisher follows b");
  await waitFor(() => confirmed.size >= atKill + 500, 4000, "500 more confirmed by the new master");
  await publishing.stop();
  await waitFor(() => publishing.pending === 0, 4000, "every send settled");
  await waitFor(() => [...confirmed].every((n) => received.has(n)), 4000, "every confirmed message delivered").catch(() => {});

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
  const late = node("late", temps.make("kitten-cluster-late-"), { durability: "memory", isMaster: false });
  late.port = closedPort;
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

  const publishing = publishLoop((n) => publisher.send(`restart/v1/${n % 2}`, { n }), 50);
  const { confirmed, rejected } = publishing;

  // The master goes away and comes back on the same port with the same store.
  await waitFor(() => confirmed.size >= 200, 3000);
  await a!.stop();
  await waitFor(() => !publisher.status()[0]!.connected && !consumer.status()[0]!.connected, 2000, "the clients saw the master go");
  a!.start();
  await waitFor(() => a!.deliveries > 50, 3000, "the consumer re-registered on the master");
  // A slave goes away and comes back.
  const atSlave = confirmed.size;
  await b!.stop();
  await waitFor(() => !publisher.status()[1]!.connected && !consumer.status()[1]!.connected, 2000, "the clients saw the slave go");
  b!.start();
  await allConnected(publisher);
  await allConnected(consumer);
  await waitFor(() => confirmed.size >= atSlave + 200, 3000);
  await publishing.stop();
  await waitFor(() => publishing.pending === 0, 3000);
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
  await waitFor(() => got.length >= 10);
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
  expect(b!.live("gone/v1")).toBe(5);
  await allConnected(consumer);
  await allConnected(publisher);
  // The clients tell it the acks it missed. Otherwise b keeps them for ever (its depth only grows
  // with each restart) and delivers them again when it is promoted.
  await waitFor(() => b!.live("gone/v1") === 0, 3000).catch(() => {});
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
  // Otherwise a keeps them for ever, and delivers them again when it is master again.
  await waitFor(() => a!.live("switch/v1") === 0, 3000).catch(() => {});
  expect(a!.live("switch/v1")).toBe(0);
  expect(a!.deliveries).toBe(0);
});
