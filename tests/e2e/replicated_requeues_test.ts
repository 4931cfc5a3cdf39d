/**
 * Requeues across a failover: a message the master's consumer nacked with a delay
 * (`done(false, s)`) waits out the rest of it on the slave that takes over, instead of being
 * delivered at once, and its deliveries are counted on (`nbRequeues`). In-process brokers that know each other through `cluster.peers`, on one
 * clock the test moves, so no test waits for a delay to pass.
 */
import { afterEach, expect, it } from "bun:test";
import { type Received, recorder, waitFor } from "../helpers/broker.ts";
import { type Peer, Peers, sendAll } from "../helpers/peers.ts";
import { canPage } from "../../src/server/store/store.ts";
import { type AppendOp, OP } from "../../src/protocol/mod.ts";

const peers = new Peers();
afterEach(() => peers.teardown());

/** Two brokers on one clock the test moves by hand (ms since epoch); the first is master. */
async function pair(overrides: Record<string, unknown> = {}) {
  const clock = { t: 1_900_000_000_000 };
  const [master, slave] = await peers.cluster(2, overrides);
  for (const peer of [master!, slave!]) peer.now = () => clock.t;
  return { clock, master: master!, slave: slave! };
}

/** The slave's copy of a message: in memory, tracked for its master. */
const mirrored = (slave: Peer, messageId: string) => slave.broker.cluster.mirror.get(messageId);
const depth = (peer: Peer, queue: string) => peer.broker.queues.get(queue)?.depth();

/** Consumes `channel`, nacking the first delivery with `delaySeconds`; resolves with its message id. */
async function nackFirst(mq: Awaited<ReturnType<Peers["client"]>>["mq"], channel: string, delaySeconds: number) {
  const held: Received[] = [];
  const nacking = mq.consume(channel, (error, message, done, info) => {
    if (error) return;
    held.push({ message, info: info!, done, at: performance.now() });
    done(false, delaySeconds);
  });
  await nacking.ready;
  await waitFor(() => held.length === 1, 5_000, "the first delivery");
  return { messageId: held[0]!.info.messageId, nacking };
}

/**
 * On a new master: a consumer registers, and a message sent now overtakes the delayed one, which
 * stays delayed. Returns what the consumer got, and its client.
 */
async function servedAroundTheDelay(master: Peer) {
  const got: Received[] = [];
  const { mq: consumer } = await peers.client([master.host]);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await consumer.send("jobs/v1/1", { n: 2 });
  await waitFor(() => got.length === 1, 5_000);
  expect(got.map((r) => r.message)).toEqual([{ n: 2 }]);
  expect(depth(master, "jobs/v1")?.delayed).toBe(1);
  return { got, consumer };
}

it("cluster: a message nacked with a delay on the master is held back by the slave promoted in its place until the delay is over, and counted on", async () => {
  const { clock, master, slave } = await pair();
  master.start();
  slave.start();
  await waitFor(() => slave.upstreamState === "in-sync", 10_000, "slave in sync");
  // Registered on both brokers: on the slave the copy is ready (held for its master), not waiting.
  const { mq } = await peers.client([master.host, slave.host]);
  await mq.send("jobs/v1/1", { n: 1 });
  const { messageId, nacking } = await nackFirst(mq, "jobs/v1/1", 60);
  await waitFor(() => depth(slave, "jobs/v1")?.delayed === 1, 5_000, "the slave holds the copy back");
  expect(mirrored(slave, messageId)?.notBefore).toBe(clock.t + 60_000);
  expect(depth(slave, "jobs/v1")?.ready).toBe(0);
  await nacking.close();

  clock.t += 10_000;
  await master.stop();
  slave.broker.reload(slave.config({ isMaster: true }));
  const { got, consumer } = await servedAroundTheDelay(slave);

  clock.t += 49_000; // 59 s into the minute: still waiting
  await consumer.send("jobs/v1/1", { n: 3 });
  await waitFor(() => got.length === 2, 5_000);
  expect(got.map((r) => r.message)).toEqual([{ n: 2 }, { n: 3 }]);

  clock.t += 1_000; // the minute is over: the new master's next tick hands it out
  await waitFor(() => got.length === 3, 5_000);
  expect(got[2]!.message).toEqual({ n: 1 });
  expect(got[2]!.info.messageId).toBe(messageId);
  expect(got[2]!.info.nbRequeues).toBe(1); // the delivery before the failover counts
}, 30_000);

it("cluster: a slave that attaches after the nack is told the delays in force once it caught up", async () => {
  const { clock, master, slave } = await pair();
  master.start();
  const { mq } = await peers.client([master.host]);
  await mq.send("jobs/v1/1", { n: 1 });
  const { messageId } = await nackFirst(mq, "jobs/v1/1", 60);
  await waitFor(() => depth(master, "jobs/v1")?.delayed === 1, 5_000);

  slave.start(); // catches up from a snapshot, then hears of the delays in force
  await waitFor(() => mirrored(slave, messageId)?.notBefore === clock.t + 60_000, 10_000, "the slave knows the delay");
  expect(depth(slave, "jobs/v1")?.waiting).toBe(1); // no consumer on the slave: held back when routed
}, 30_000);

it("cluster: the slave's store keeps a requeue it was told: restarted as master, it holds the message back and counts on", async () => {
  const { clock, master, slave } = await pair();
  master.start();
  slave.start();
  await waitFor(() => slave.upstreamState === "in-sync", 10_000, "slave in sync");
  const { mq } = await peers.client([master.host]);
  await mq.send("jobs/v1/1", { n: 1 }); // confirmed once the slave stored it
  await waitFor(() => slave.broker.cluster.status().upstream?.pending === 0, 5_000, "the slave's copy stored");
  const { messageId, nacking } = await nackFirst(mq, "jobs/v1/1", 60);
  await waitFor(() => mirrored(slave, messageId)?.notBefore === clock.t + 60_000, 5_000, "the slave knows the delay");
  await nacking.close();
  await mq.disconnect();
  clock.t += 10_000;
  await master.stop();
  await slave.stop(); // writes the delay it noted

  slave.overrides = { ...slave.overrides, isMaster: true };
  slave.start();
  const { got } = await servedAroundTheDelay(slave);

  clock.t += 50_000; // the minute is over
  await waitFor(() => got.length === 2, 5_000);
  expect(got[1]!.info.messageId).toBe(messageId);
  expect(got[1]!.info.nbRequeues).toBe(1);
}, 30_000);

it("cluster: a delayed message a queue move brings in (sent again at the fence) is held back by the target group's slaves too", async () => {
  const { clock, master, slave } = await pair();
  master.start();
  slave.start();
  await waitFor(() => slave.upstreamState === "in-sync", 10_000, "slave in sync");
  const body = new Uint8Array([0xa1, 0x61, 0x6e, 0x01]); // {n: 1}
  const moved = (id: string) => [OP.MOVE_APPEND as never, 1, id, "jobs/v1", "1", body, clock.t, 1, null] as AppendOp;
  // One the target holds already (streamed before the fence), and one it receives only now.
  await master.broker.acceptMoved(moved("held-before"));
  await waitFor(() => mirrored(slave, "held-before") !== undefined, 5_000, "the slave holds the first");
  await master.broker.acceptMoved(moved("held-before"), 30_000);
  await master.broker.acceptMoved(moved("new-at-fence"), 20_000);
  await waitFor(() => mirrored(slave, "new-at-fence")?.notBefore === clock.t + 20_000, 5_000, "the slave holds the second back");
  expect(mirrored(slave, "held-before")?.notBefore).toBe(clock.t + 30_000);
}, 30_000);

it("cluster: a requeue of a message the slave holds in its store only (paged) applies once the slave reads it back", async () => {
  const budget = { channels: { "jobs/v1": { memoryBudgetBytes: 1024 } } }; // a few messages in memory, the rest paged
  const { clock, master, slave } = await pair(budget);
  master.start();
  slave.start();
  await waitFor(() => slave.upstreamState === "in-sync", 10_000, "slave in sync");
  const { mq } = await peers.client([master.host]);
  await sendAll(mq, "jobs/v1/1", 0, 100);
  const held: Received[] = [];
  const nacked: string[] = [];
  await mq.consume("jobs/v1/1", (error, message, done, info) => {
    if (error) return;
    if ((message as { n: number }).n !== 99) return held.push({ message, info: info!, done, at: performance.now() });
    nacked.push(info!.messageId);
    done(false, 60);
  }, { prefetch: 200 }).ready;
  await waitFor(() => nacked.length === 1 && held.length === 99, 10_000, "every message delivered, the last nacked");
  const last = nacked[0]!;
  expect(mirrored(slave, last)).toBeUndefined(); // paged on the slave
  // A send streamed after the requeue: once the slave holds it, it has read the requeue too.
  await mq.send("jobs/v1/2", { n: 100 });
  await waitFor(() => slave.live("jobs/v1") === 101, 5_000, "the slave holds the send that followed");
  expect(mirrored(slave, last)).toBeUndefined();

  for (const delivery of held) delivery.done(); // the slave drops them, and reads the rest back
  await waitFor(() => mirrored(slave, last) !== undefined, 10_000, "the slave reads the last one back");
  expect(mirrored(slave, last)!.notBefore).toBe(clock.t + 60_000);
  expect(mirrored(slave, last)!.deliveries).toBe(1);
  const store = slave.broker.store;
  if (!canPage(store)) throw new Error("the slave's store pages");
  const row = () => store.readQueue("jobs/v1", 0, 1_000).find((r) => r.id === last);
  await waitFor(() => row()?.notBefore === clock.t + 60_000, 5_000, "the requeue on the slave's disk");
  expect(row()!.deliveries).toBe(1);
}, 30_000);
