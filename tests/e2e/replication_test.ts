/**
 * Catch-up between brokers, in-sync replicas and safe promotion, with in-process brokers that
 * know each other through `cluster.peers` (each with its own serviceId and key pair).
 *
 * The publishing client knows only the master, so nothing a slave holds comes from the client's
 * replay of recent sends: every message a slave has, it got over its peer link.
 */
import { afterEach, expect, it } from "bun:test";
import { join } from "node:path";
import { Client, type ClientOptions, type KittenError } from "../../mod.ts";
import { clientOptions, type Received, recorder, rejection, waitFor } from "../helpers/broker.ts";
import { type Peer, Peers, sendAll } from "../helpers/peers.ts";
import { renderMetrics } from "../../src/admin/metrics.ts";

const peers = new Peers();
const { cleanup, temps } = peers;
const cluster = (count: number, overrides: Record<string, unknown> = {}) => peers.cluster(count, overrides);
const client = (hosts: string[], options: Partial<ClientOptions> = {}) => peers.client(hosts, options);

afterEach(() => peers.teardown());

it("replication: a slave started after 25,000 confirmed sends (more than a client replays) catches up from the master, then serves them all after promotion", async () => {
  const [master, slave] = await cluster(2);
  master!.start();
  const { mq: publisher } = await client([master!.host]); // the slave is not even in its hosts
  await sendAll(publisher, "catchup/v1/x", 0, 25_000);

  slave!.start();
  await waitFor(() => slave!.upstreamState === "in-sync", 20_000, "slave in sync");
  expect(slave!.live("catchup/v1")).toBe(25_000);
  const status = master!.broker.cluster.status();
  expect(status.inSync).toEqual(["b0", "b1"]);
  expect(status.replicas[0]).toMatchObject({ peer: "b1", state: "in-sync", snapshotLeft: 0 });
  // The same, as Prometheus sees it.
  const masterMetrics = renderMetrics(master!.server!);
  expect(masterMetrics).toContain('kitten_mq_cluster_replica_in_sync{peer="b1"} 1');
  expect(masterMetrics).toContain("kitten_mq_cluster_in_sync_brokers 2");
  expect(masterMetrics).toMatch(/kitten_mq_cluster_replica_lag_entries\{peer="b1"\} \d+/);
  expect(renderMetrics(slave!.server!)).toContain('kitten_mq_cluster_upstream_in_sync{state="in-sync"} 1');

  // Live sends stream to it too, and acks on the master remove them there.
  const { mq: consumer } = await client([master!.host]);
  await sendAll(publisher, "catchup/v1/y", 0, 100);
  await waitFor(() => slave!.live("catchup/v1") === 25_100, 5_000, "live sends replicated");
  // Every entry received is counted once stored: nothing left pending, none counted twice.
  await waitFor(() => slave!.broker.cluster.status().upstream?.pending === 0, 5_000, "entries counted as stored");
  expect(renderMetrics(slave!.server!)).toContain("kitten_mq_cluster_upstream_pending_entries 0");
  const got: Received[] = [];
  await consumer.consume("catchup/v1/y", recorder(got), { prefetch: 100 }).ready;
  await waitFor(() => got.length === 100, 5_000);
  await waitFor(() => slave!.live("catchup/v1") === 25_000, 5_000, "acks replicated as removals");

  // The master dies; the in-sync slave may be promoted and delivers every message.
  await consumer.disconnect();
  await master!.stop();
  slave!.broker.reload(slave!.config({ isMaster: true }));
  expect(slave!.broker.isMaster).toBe(true);
  const { mq: late } = await client([slave!.host]);
  const delivered = new Set<number>();
  await late.consume("catchup/v1/x", (error, message, done) => {
    if (error) return;
    delivered.add((message as { n: number }).n);
    done();
  }, { prefetch: 1000 }).ready;
  await waitFor(() => delivered.size === 25_000, 20_000, "every confirmed message delivered by the new master");
}, 60_000);

it("replication: with minInSyncReplicas 2, a send is refused with NOT_ENOUGH_REPLICAS while the slave is away, and confirmed once it is in sync", async () => {
  const [master, slave] = await cluster(2, { cluster: { minInSyncReplicas: 2 } });
  master!.start();
  // The client sends a refused send again until sendTimeoutMs: then TIMEOUT, caused by the refusal.
  const { mq } = await client([master!.host], { sendTimeoutMs: 300 });
  const refused = await rejection(mq.send("isr/v1/x", { n: 1 }));
  expect(refused.code).toBe("TIMEOUT");
  expect((refused.cause as KittenError).code).toBe("NOT_ENOUGH_REPLICAS");
  expect((refused.cause as KittenError).message).toContain("1 of the 2 brokers");
  expect(master!.live("isr/v1")).toBe(0); // nothing was stored

  slave!.start();
  await waitFor(() => master!.broker.cluster.status().inSync.length === 2, 10_000, "slave in sync");
  await sendAll(mq, "isr/v1/x", 0, 1_000);
  // Confirmed means stored on both.
  expect(slave!.live("isr/v1")).toBe(1_000);
  expect(master!.live("isr/v1")).toBe(1_000);

  await slave!.stop();
  await waitFor(() => master!.broker.cluster.status().inSync.length === 1, 5_000, "slave out of sync");
  expect(((await rejection(mq.send("isr/v1/x", { n: 2 }))).cause as KittenError).code).toBe("NOT_ENOUGH_REPLICAS");
}, 30_000);

it("replication: a slave that never caught up refuses promotion with how far behind it is, unless forced", async () => {
  const [master, slave] = await cluster(2);
  slave!.start(); // its master is not running: it cannot be in sync
  await waitFor(() => slave!.upstreamState === "searching", 2_000);
  let refused: KittenError | null = null;
  try {
    slave!.broker.reload(slave!.config({ isMaster: true }));
  } catch (error) {
    refused = error as KittenError;
  }
  expect(refused?.code).toBe("NOT_IN_SYNC");
  expect(refused?.message).toContain(`Cannot promote "b1" to master: not in sync: no master reached among cluster.peers (${master!.host})`);
  expect(refused?.message).toContain("--force");
  expect(slave!.broker.isMaster).toBe(false);

  slave!.broker.reload(slave!.config({ isMaster: true }), { force: true });
  expect(slave!.broker.isMaster).toBe(true);
  expect(slave!.logger.lines.some((line) => line.includes("promotion forced") && line.includes("may be lost"))).toBe(true);
}, 20_000);

it("replication: a slave that catches up drops what the master no longer holds (acked while it was away)", async () => {
  const [master, slave] = await cluster(2);
  master!.start();
  slave!.start();
  const { mq: publisher } = await client([master!.host, slave!.host]);
  await waitFor(() => slave!.upstreamState === "in-sync", 10_000);
  await sendAll(publisher, "away/v1/x", 0, 200);
  await waitFor(() => slave!.live("away/v1") === 200, 5_000);

  await slave!.stop();
  const { mq: consumer } = await client([master!.host]);
  const got: Received[] = [];
  await consumer.consume("away/v1/x", recorder(got), { prefetch: 1000 }).ready;
  await waitFor(() => got.length === 200, 5_000);
  await waitFor(() => master!.live("away/v1") === 0, 5_000);

  slave!.start(); // its store still holds the 200 acked meanwhile
  await waitFor(() => slave!.upstreamState === "in-sync", 10_000);
  await waitFor(() => slave!.live("away/v1") === 0, 5_000, "stale messages dropped at catch-up");
}, 30_000);

it("replication: acks a client copies to the slave settle its messages first; the master's removals that follow find nothing to wait for", async () => {
  const [master, slave] = await cluster(2);
  master!.start();
  slave!.start();
  await waitFor(() => slave!.upstreamState === "in-sync", 10_000);
  const { mq } = await client([master!.host, slave!.host]); // acks are copied to the slave
  const got: Received[] = [];
  await mq.consume("copied/v1/x", recorder(got), { prefetch: 100 }).ready;
  await sendAll(mq, "copied/v1/x", 0, 500);
  await waitFor(() => got.length === 500, 5_000);
  await waitFor(() => master!.live("copied/v1") === 0 && slave!.live("copied/v1") === 0, 5_000);
  // Removals of messages settled here already are not kept as "early" (they would pile up and
  // make a paging slave read ahead for nothing).
  await waitFor(() => master!.broker.cluster.status().replicas[0]?.lagEntries === 0, 5_000, "removals streamed");
  expect(slave!.broker.cluster.mirror.earlyRemovals).toBe(0);
}, 20_000);

it("replication: a broker that is not in cluster.peers cannot open a peer link", async () => {
  const [master, slave] = await cluster(2);
  master!.peers = []; // the master does not list the slave
  master!.start();
  slave!.start();
  await waitFor(() => slave!.logger.lines.some((line) => line.includes("NOT_A_PEER")), 5_000, "refused as a peer");
  expect(slave!.upstreamState).not.toBe("in-sync");
}, 20_000);

it("replication: a slave catches up a backlog the master keeps on disk (paged), and drops it as the master's consumer acks it", async () => {
  // A few KiB of memory per queue: nearly every message is paged, on both brokers.
  const [master, slave] = await cluster(2, { memoryBudgetBytes: 4096 });
  master!.start();
  const { mq: publisher } = await client([master!.host]);
  await sendAll(publisher, "paged/v1/x", 0, 5_000);
  const held = (peer: Peer) => {
    const queue = peer.broker.queues.get("paged/v1");
    return (queue?.live ?? 0) + (queue?.backlog.count ?? 0);
  };
  expect(master!.broker.queues.get("paged/v1")!.backlog.count).toBeGreaterThan(4_000);

  slave!.start();
  await waitFor(() => slave!.upstreamState === "in-sync", 20_000, "slave in sync");
  expect(held(slave!)).toBe(5_000);
  expect(slave!.broker.queues.get("paged/v1")!.backlog.count).toBeGreaterThan(4_000); // paged there too

  // A restart catches up again: what the slave holds on disk is not stored twice.
  await slave!.stop();
  slave!.start();
  await waitFor(() => slave!.upstreamState === "in-sync", 20_000, "slave in sync again");
  expect(held(slave!)).toBe(5_000);
  expect(slave!.broker.diskUsage("paged/v1").messages).toBe(5_000);

  const { mq: consumer } = await client([master!.host]);
  const got = new Set<number>();
  await consumer.consume("paged/v1/x", (error, message, done) => {
    if (error) return;
    got.add((message as { n: number }).n);
    done();
  }, { prefetch: 500 }).ready;
  await waitFor(() => got.size === 5_000, 20_000, "master delivered everything");
  await waitFor(() => held(slave!) === 0, 20_000, "the slave dropped every acked message, paged ones included");
}, 60_000);

it("replication: a master whose idle queue let its messages go (left in the store only) streams them all to a slave that catches up, and both drop them as they are acked", async () => {
  const [master, slave] = await cluster(2);
  master!.start();
  const { mq: publisher } = await client([master!.host]);
  await sendAll(publisher, "idle/v1/x", 0, 500);
  const queue = master!.broker.queues.get("idle/v1")!;
  expect(queue.live).toBe(500); // under the budget: in memory
  expect(master!.broker.releaseIdleQueues()).toBe(500);
  expect(queue.live).toBe(0);
  expect(queue.backlog.count).toBe(500);
  const held = (peer: Peer) => {
    const q = peer.broker.queues.get("idle/v1");
    return (q?.live ?? 0) + (q?.backlog.count ?? 0);
  };

  slave!.start();
  await waitFor(() => slave!.upstreamState === "in-sync", 20_000, "slave in sync");
  expect(held(slave!)).toBe(500);

  const { mq: consumer } = await client([master!.host]);
  const got: number[] = [];
  await consumer.consume("idle/v1/x", (error, message, done) => {
    if (error) return;
    got.push((message as { n: number }).n);
    done();
  }, { prefetch: 50 }).ready;
  await waitFor(() => got.length >= 500, 20_000, "master delivered everything");
  expect(got).toEqual(Array.from({ length: 500 }, (_, i) => i));
  await waitFor(() => held(slave!) === 0, 20_000, "the slave dropped every acked message");
}, 60_000);

it("replication: peers are pinned apart from clients: a client named like a peer cannot take its place, and another key claiming to be that peer is refused", async () => {
  const [master, slave] = await cluster(2);
  master!.start();
  // A client takes the id "b1" first: it pins its own key, as a client.
  const { mq } = await (async () => {
    const client = new Client();
    cleanup.add(client);
    await client.connect(clientOptions({ host: master!.host }, { clientId: "b1" }));
    return { mq: client };
  })();
  expect(mq.isConnected()).toBe(true);

  slave!.start(); // the real peer b1, with its own key pair: pinned as a peer
  await waitFor(() => slave!.upstreamState === "in-sync", 10_000, "the real peer in sync");
  await slave!.stop();

  // Another broker calling itself b1, with another key pair.
  const impostor = peers.peer("b1", slave!.port, join(temps.make("kitten-impostor-"), "b1"), { isMaster: false });
  impostor.peers = [master!.host];
  impostor.start();
  await waitFor(() => impostor.logger.lines.some((line) => line.includes("KEY_MISMATCH")), 10_000, "the impostor refused");
  expect(impostor.upstreamState).not.toBe("in-sync");
}, 30_000);
