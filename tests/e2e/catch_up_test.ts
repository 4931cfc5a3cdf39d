/**
 * Catching up from a position with real brokers (in this process, fsync, real files): a slave
 * that comes back gets only what it missed; a slave in sync with the old master is in sync with
 * the new one without a transfer; a snapshot interrupted, or a master gone in the middle of a
 * catch-up, ends with the slave holding exactly what its master holds.
 */
import { afterEach, expect, it } from "bun:test";
import { waitFor } from "../helpers/broker.ts";
import { dial, hello } from "../helpers/wire.ts";
import { decode, encode, OP } from "../../src/protocol/mod.ts";
import { renderMetrics } from "../../src/admin/metrics.ts";
import { type Peer, Peers, sendAll } from "../helpers/peers.ts";

const peers = new Peers();
afterEach(() => peers.teardown());

const replicaOf = (master: Peer, name: string) => master.broker.cluster.status().replicas.find((r) => r.peer === name);
const inSyncWith = (master: Peer, name: string) => replicaOf(master, name)?.state === "in-sync";

it("catch-up: a restarted slave gets only the entries it missed, from its position, not a snapshot", async () => {
  const [master, slave] = await peers.cluster(2);
  master!.start();
  slave!.start();
  await waitFor(() => inSyncWith(master!, "b1"), 10_000, "slave in sync");
  const { mq } = await peers.client([master!.host]);
  await sendAll(mq, "pos/v1/x", 0, 5_000);
  await waitFor(() => slave!.live("pos/v1") === 5_000, 10_000, "replicated");

  await slave!.stop();
  await sendAll(mq, "pos/v1/x", 5_000, 5_300);
  const snapshotsBefore = master!.broker.cluster.replication.snapshotsSent;
  slave!.start();
  await waitFor(() => inSyncWith(master!, "b1"), 10_000, "slave in sync again");
  const replica = replicaOf(master!, "b1")!;
  expect(replica.catchUp).toBe("position");
  expect(master!.broker.cluster.replication.snapshotsSent).toBe(snapshotsBefore);
  // Proportional to the 300 messages it missed (each entry is about 100 bytes), not to the 5,300 held.
  expect(replica.catchUpBytes).toBeGreaterThan(300 * 50);
  expect(replica.catchUpBytes).toBeLessThan(300 * 400);
  expect(slave!.live("pos/v1")).toBe(5_300);
  expect(slave!.logger.lines.some((line) => /catching up from index \d+;300 entries to receive/.test(line))).toBe(true);
  // Shown: GET /status (cluster.log, each replica's catch-up) and GET /metrics.
  expect(master!.broker.cluster.status().log).toMatchObject({ positionCatchUps: 1, snapshotsSent: snapshotsBefore });
  const metrics = renderMetrics(master!.server!);
  expect(metrics).toContain("# TYPE kitten_mq_cluster_snapshots_sent_total counter");
  expect(metrics).toContain("kitten_mq_cluster_position_catch_ups_total 1");
  expect(metrics).toContain(`kitten_mq_cluster_replica_catch_up_bytes{peer="b1",from="position"} ${replica.catchUpBytes}`);
  expect(metrics).toMatch(/kitten_mq_cluster_replica_lag_bytes\{peer="b1"\} \d+/);
}, 30_000);

it("catch-up: after a promotion, a slave that was in sync with the old master is in sync with the new one without a transfer", async () => {
  const [b0, b1, b2] = await peers.cluster(3, { cluster: { minInSyncReplicas: 2 } });
  for (const peer of [b0, b1, b2]) peer!.start();
  await waitFor(() => inSyncWith(b0!, "b1") && inSyncWith(b0!, "b2"), 10_000, "both slaves in sync");
  const { mq } = await peers.client([b0!.host, b1!.host, b2!.host]);
  await sendAll(mq, "promo/v1/x", 0, 3_000);
  await waitFor(() => b1!.live("promo/v1") === 3_000 && b2!.live("promo/v1") === 3_000, 10_000, "replicated");
  await waitFor(() => b0!.broker.cluster.status().replicas.every((r) => r.lagEntries === 0), 5_000, "acknowledged");

  await b0!.stop();
  b1!.broker.reload(b1!.config({ isMaster: true }));
  await waitFor(() => inSyncWith(b1!, "b2"), 10_000, "b2 in sync with the new master");
  const replica = replicaOf(b1!, "b2")!;
  expect(replica.catchUp).toBe("position");
  expect(replica.catchUpBytes).toBeLessThan(1_000); // RESUME and nothing else
  expect(b1!.broker.cluster.replication.snapshotsSent).toBe(0);
  // The new master goes on with the index sequence, and confirms with b2 at once.
  await sendAll(mq, "promo/v1/x", 3_000, 3_100);
  expect(b2!.live("promo/v1")).toBe(3_100);
}, 30_000);

it("catch-up: a snapshot interrupted halfway is sent again, and the slave ends with exactly what the master holds", async () => {
  const [master, slave] = await peers.cluster(2, { memoryBudgetBytes: 65_536 });
  master!.start();
  const { mq } = await peers.client([master!.host]);
  await sendAll(mq, "cut/v1/x", 0, 40_000);

  slave!.start();
  await waitFor(() => (slave!.broker.cluster.status().upstream?.snapshotReceived ?? 0) > 0, 10_000, "snapshot started");
  expect(slave!.upstreamState).toBe("catching-up");
  await slave!.stop(); // halfway: its store holds part of the snapshot, and no position
  slave!.start();
  await waitFor(() => inSyncWith(master!, "b1"), 30_000, "slave in sync after a second snapshot");
  expect(replicaOf(master!, "b1")!.catchUp).toBe("snapshot");
  expect(slave!.live("cut/v1")).toBe(40_000);
  expect(slave!.broker.diskUsage("cut/v1").messages).toBe(40_000); // nothing stored twice
}, 60_000);

/** A master and a slave in sync, 100 messages sent to `channel` and held by both; then the slave stops. */
async function slaveAwayAfter100(channel: string) {
  const [master, slave] = await peers.cluster(2);
  master!.start();
  slave!.start();
  await waitFor(() => inSyncWith(master!, "b1"), 10_000, "b1 in sync");
  const { mq } = await peers.client([master!.host]);
  await sendAll(mq, channel, 0, 100);
  const queue = channel.slice(0, channel.lastIndexOf("/"));
  await waitFor(() => slave!.live(queue) === 100, 5_000, "b1 holds the first 100");
  await slave!.stop();
  return { master: master!, slave: slave!, mq };
}

/**
 * The master restarts (it saves where its log stands), then the slave comes back: the master's
 * log kept none of what the slave missed, so it catches up from a snapshot.
 */
async function restartMasterThenSlave(master: Peer, slave: Peer): Promise<void> {
  await master.stop();
  master.start();
  slave.start();
  await waitFor(() => inSyncWith(master, "b1"), 10_000, "b1 in sync again");
  expect(replicaOf(master, "b1")!.catchUp).toBe("snapshot");
}

it("catch-up: a slave away while its master took sends and then restarted gets what it missed (minInSyncReplicas 1)", async () => {
  const { master, slave, mq } = await slaveAwayAfter100("away/v1/x");
  await sendAll(mq, "away/v1/x", 100, 200); // the master confirms alone
  await mq.disconnect();
  await restartMasterThenSlave(master, slave);
  expect(slave.live("away/v1")).toBe(200);
}, 30_000);

it("catch-up: a slave away while its master's consumers acked and the master then restarted drops what was acked", async () => {
  const { master, slave, mq } = await slaveAwayAfter100("acked/v1/x");
  const before = master.broker.cluster.replication.index;
  await mq.consume("acked/v1/x", (error, _message, done) => {
    if (!error) done();
  }).ready;
  await waitFor(() => master.live("acked/v1") === 0, 5_000, "all acked on the master");
  await waitFor(() => master.broker.cluster.replication.index > before, 5_000, "their removal logged");
  await mq.disconnect();
  await restartMasterThenSlave(master, slave); // the log ends with that removal: the position saved includes it
  await waitFor(() => slave.live("acked/v1") === 0, 5_000, "b1 drops the acked messages");
}, 30_000);

it("catch-up: a master gone in the middle of a slave's catch-up — the slave catches up from the next master and holds every message", async () => {
  const [b0, b1, b2] = await peers.cluster(3, { memoryBudgetBytes: 65_536 });
  b0!.start();
  b1!.start();
  await waitFor(() => inSyncWith(b0!, "b1"), 10_000, "b1 in sync");
  const { mq } = await peers.client([b0!.host]);
  await sendAll(mq, "gone/v1/x", 0, 40_000);
  await waitFor(() => b0!.broker.cluster.status().replicas.every((r) => r.lagEntries === 0), 10_000, "b1 holds it all");

  b2!.start();
  await waitFor(() => (b2!.broker.cluster.status().upstream?.snapshotReceived ?? 0) > 0, 10_000, "b2 catching up");
  await b0!.stop(); // the master goes while b2 copies its snapshot
  b1!.broker.reload(b1!.config({ isMaster: true }));
  await waitFor(() => inSyncWith(b1!, "b2"), 30_000, "b2 in sync with b1");
  expect(b2!.live("gone/v1")).toBe(40_000);
  expect(b2!.broker.diskUsage("gone/v1").messages).toBe(40_000);
}, 60_000);

it("catch-up: a slave ahead of a newly promoted master goes back to where their logs part, drops what that master never had, and stores a resend of it again", async () => {
  const [b0, b1, b2] = await peers.cluster(3);
  for (const peer of [b0, b1, b2]) peer!.start();
  await waitFor(() => inSyncWith(b0!, "b1") && inSyncWith(b0!, "b2"), 10_000, "both slaves in sync");
  const { mq } = await peers.client([b0!.host]);
  await sendAll(mq, "ahead/v1/x", 0, 1_000);
  await waitFor(() => b0!.broker.cluster.status().replicas.every((r) => r.lagEntries === 0), 5_000, "acknowledged");

  await b1!.stop(); // b1 misses what follows; b2 receives it
  await sendAll(mq, "ahead/v1/x", 1_000, 1_200);
  await waitFor(() => b2!.live("ahead/v1") === 1_200, 5_000, "b2 holds 200 more");
  const idsOf = (peer: Peer) => new Set([...peer.broker.queues.get("ahead/v1")!.liveCopies()].map((copy) => copy.message.id));
  const heldBefore = idsOf(b2!);
  await mq.disconnect();
  await b0!.stop();

  b1!.start();
  await waitFor(() => b1!.upstreamState === "searching", 5_000, "b1 finds no master");
  b1!.broker.reload(b1!.config({ isMaster: true }), { force: true }); // an operator's choice: it may lose messages
  await waitFor(() => inSyncWith(b1!, "b2"), 10_000, "b2 in sync with b1");
  expect(replicaOf(b1!, "b2")!.catchUp).toBe("position");
  expect(b1!.live("ahead/v1")).toBe(1_000);
  expect(b2!.live("ahead/v1")).toBe(1_000);
  expect(b2!.logger.lines.some((line) => /went back to index \d+: dropped 200 messages the master does not hold/.test(line))).toBe(true);

  // b2 accepted the dropped messages once: their ids no longer count as held, so a resend of one
  // (its sender was never told it was confirmed) is stored again, not answered as a duplicate.
  const heldAfter = idsOf(b2!);
  const dropped = [...heldBefore].filter((id) => !heldAfter.has(id));
  expect(dropped.length).toBe(200);
  const wire = await dial(b2!.port);
  peers.cleanup.defer(() => wire.close());
  await hello(wire, "resender");
  wire.send([OP.SEND, 1, "ahead/v1/x", dropped[0], encode({ n: 1_000 })]);
  expect((await wire.expectAny([OP.OK, OP.ERROR]))[0]).toBe(OP.OK);
  await waitFor(() => b2!.live("ahead/v1") === 1_001, 5_000, "b2 stores the resend");
}, 30_000);

/**
 * A sender that reaches b1 alone while b0 is master: b1 holds the message, no master streamed it.
 * Once b1 is promoted the sender resends it, and b1 confirms the resend only once b2 holds it.
 */
async function loneSenderResend(body: Uint8Array, channels: Record<string, unknown> = {}): Promise<[Peer, Peer]> {
  const [b0, b1, b2] = await peers.cluster(3, { cluster: { minInSyncReplicas: 2 }, channels });
  for (const peer of [b0, b1, b2]) peer!.start();
  await waitFor(() => inSyncWith(b0!, "b1") && inSyncWith(b0!, "b2"), 10_000, "both slaves in sync");
  const wire = await dial(b1!.port);
  peers.cleanup.defer(() => wire.close());
  await hello(wire, "lone-sender");
  wire.send([OP.SEND, 1, "unlogged/v1/x", "m-unlogged", body]);
  await waitFor(() => b1!.live("unlogged/v1") === 1, 5_000, "b1 holds it");
  expect(b2!.live("unlogged/v1")).toBe(0);

  await b0!.stop();
  b1!.broker.reload(b1!.config({ isMaster: true }));
  await waitFor(() => inSyncWith(b1!, "b2"), 10_000, "b2 in sync with b1");
  wire.send([OP.SEND, 2, "unlogged/v1/x", "m-unlogged", body]); // the sender's resend, same id
  let answer = await wire.expectAny([OP.OK, OP.ERROR]);
  // The first send was answered by b1 as a slave ("slave": not a confirmation): wait for ref 2's.
  while (answer[0] === OP.OK && !(answer[1] as number[]).includes(2)) answer = await wire.expectAny([OP.OK, OP.ERROR]);
  expect(answer[0]).toBe(OP.OK);
  expect(answer[2]).not.toBe("slave");
  expect(b2!.live("unlogged/v1")).toBe(1); // confirmed only once the in-sync replica holds it too
  expect(b1!.live("unlogged/v1")).toBe(1); // and b1 did not queue it twice
  return [b1!, b2!];
}

it("catch-up: a message a slave got only from a client is streamed by it, once promoted, before its resend is confirmed", async () => {
  await loneSenderResend(encode({ n: 1 }));
}, 30_000);

it("catch-up: that message is streamed in its channel's format, as the slave stored it", async () => {
  const [b1, b2] = await loneSenderResend(encode({ paid: 1 }), { "unlogged/v1": { map: { paid: ["binary", "toBoolean"] } } });
  const copy = (peer: Peer) => peer.broker.store!.load().find((message) => message.id === "m-unlogged")!.body;
  expect(decode(copy(b1))).toEqual({ paid: true });
  expect(decode(copy(b2))).toEqual({ paid: true });
}, 30_000);

it("catch-up: a master that has confirmed nothing yet saves the position it was elected at, not index 0", async () => {
  const [b0, b1] = await peers.cluster(2, { cluster: { minInSyncReplicas: 2 } });
  b0!.start();
  b1!.start();
  await waitFor(() => inSyncWith(b0!, "b1"), 10_000, "b1 in sync");
  const { mq } = await peers.client([b0!.host]);
  await sendAll(mq, "saved/v1/x", 0, 500);
  await b0!.stop();
  b1!.broker.reload(b1!.config({ isMaster: true })); // alone: with minInSyncReplicas 2 it confirms nothing
  const index = b1!.broker.cluster.replication.index;
  expect(index).toBeGreaterThanOrEqual(500);
  // The periodic save, a few seconds on (the broker's clock moved ahead: no test waits for it).
  const broker = b1!.broker;
  const later = broker.now() + 5_000;
  Object.defineProperty(broker, "now", { value: () => later });
  broker.cluster.tick();
  expect(Number(broker.store!.meta("logIndex"))).toBe(index);
}, 30_000);

it("catch-up: a resend of a message the master holds is confirmed only while the in-sync set holds the log (refused with NOT_ENOUGH_REPLICAS when too few are in sync)", async () => {
  const [b0, b1] = await peers.cluster(2, { cluster: { minInSyncReplicas: 2 } });
  b0!.start();
  b1!.start();
  await waitFor(() => inSyncWith(b0!, "b1"), 10_000, "b1 in sync");
  const wire = await dial(b0!.port);
  peers.cleanup.defer(() => wire.close());
  await hello(wire, "resender");
  wire.send([OP.SEND, 1, "held/v1/x", "m-held", encode({ n: 1 })]);
  expect((await wire.expect(OP.OK, 5_000))[1]).toEqual([1]);

  await b1!.stop();
  await waitFor(() => replicaOf(b0!, "b1") === undefined, 10_000, "b1's link closed on b0");
  wire.send([OP.SEND, 2, "held/v1/x", "m-held", encode({ n: 1 })]); // the sender's resend, same id
  const refused = await wire.expect(OP.ERROR, 5_000);
  expect(refused[2]).toBe("NOT_ENOUGH_REPLICAS");
  expect(b0!.live("held/v1")).toBe(1); // held, not queued again

  b1!.start();
  await waitFor(() => inSyncWith(b0!, "b1"), 10_000, "b1 back in sync");
  wire.send([OP.SEND, 3, "held/v1/x", "m-held", encode({ n: 1 })]);
  expect((await wire.expect(OP.OK, 5_000))[1]).toEqual([3]);
  expect(b0!.live("held/v1")).toBe(1);
  expect(b1!.live("held/v1")).toBe(1);
}, 30_000);
