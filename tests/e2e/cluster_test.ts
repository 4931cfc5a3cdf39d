/**
 * Several brokers end to end, in steady state: three brokers on loopback, one master and two
 * slaves. Only the master delivers; the slaves keep the same messages and their depth follows the
 * acks (mirrored by the client) back to 0; a send is settled by the master only. Brokers going away
 * and two masters have files of their own; the shared setup is tests/helpers/cluster.ts.
 */
import { expect, it } from "bun:test";
import { type Received, recorder, sleep, waitFor } from "../helpers/broker.ts";
import {
  allConnected,
  clusterFixture,
  distinct,
  range,
} from "../helpers/cluster.ts";
import { MemoryStore } from "../../src/server/store/memory_store.ts";
import type { StoredMessage } from "../../src/server/store/store.ts";

const { cluster, clusterClient, relay } = clusterFixture();

// ── steady state ─────────────────────────────────────────────────────────────────────────────

it("cluster: steady state — only the master delivers; the slaves' depth follows acks back to 0", async () => {
  const [a, b, c] = cluster(3);
  const hosts = [a!.host, b!.host, c!.host];
  const { mq: consumer } = await clusterClient(hosts);
  const { mq: publisher } = await clusterClient(hosts);
  await allConnected(consumer);
  await allConnected(publisher);
  expect(consumer.status()).toEqual([
    { host: a!.host, connected: true, role: "master", epoch: 0, master: true, group: "default" },
    { host: b!.host, connected: true, role: "slave", epoch: 0, master: false, group: "default" },
    { host: c!.host, connected: true, role: "slave", epoch: 0, master: false, group: "default" },
  ]);

  const got: Received[] = [];
  const sub = consumer.consume("steady/v1/*", recorder(got, { ack: false }), { prefetch: 100 });
  await sub.ready;
  expect(sub.prefetch).toBe(100); // every broker grants it, a slave's OK (role "slave") as a master's
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
  // The window is the subject: a confirmation that does not come has no event to wait for.
  await sleep(300);
  expect(settled).toBeNull();
  expect(a!.live("pending/v1")).toBe(0); // the client does not know the master
  expect(mq.status().map((s) => s.master)).toEqual([false, false]);

  // A promoted slave confirms it (the client resends unconfirmed sends to a new master).
  b!.promote();
  await sent;
  expect(settled).toBe("confirmed");
  expect(masters).toEqual([{ host: b!.host, epoch: 1 }]);
  expect(mq.status().find((s) => s.host === b!.host)).toEqual({ host: b!.host, connected: true, role: "master", epoch: 1, master: true, group: "default" });
  expect(b!.live("pending/v1")).toBe(1); // confirmed once, stored once (the resend was a duplicate)
});

/** A store whose commits take `delayMs` (a slave on a slow disk, or busy): the delay is the subject. */
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
  // The slaves' last commits: every message is in their queues (counted once committed)…
  for (const slave of [b!, c!]) await waitFor(() => slave.received("race/v1") >= 200, 4000, `${slave.name} committed 200`);
  // …and the acks mirrored before they got there are applied. Otherwise each slave keeps these
  // copies for ever and delivers them again once promoted.
  await waitFor(() => a!.live("race/v1") + b!.live("race/v1") + c!.live("race/v1") === 0, 4000).catch(() => {});
  expect({ a: a!.live("race/v1"), b: b!.live("race/v1"), c: c!.live("race/v1") }).toEqual({ a: 0, b: 0, c: 0 });
});

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
  const disconnects = () => b!.logger.lines.filter((line) => line.endsWith(";disconnected")).length;
  const before = disconnects();
  toB.cut(); // the consumer↔slave link drops; the consumer↔master link stays
  await waitFor(() => !consumer.status()[1]!.connected);
  // The slave saw it go (it logs the disconnect once the consumer's registrations have left).
  await waitFor(() => disconnects() > before, 2000, "the slave logged the disconnect");
  expect(a!.live("keep/v1")).toBe(50);
  expect(b!.broker.queues.get("keep/v1")!.counters.dropped).toBe(0);
  expect(b!.live("keep/v1")).toBe(50);
});
