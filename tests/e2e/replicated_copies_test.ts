/**
 * A client given every broker of a group copies its sends and acks only to the brokers that need
 * them: the master, and slaves that take no replication stream (no `cluster.peers`). A slave that
 * takes its master's stream says so (welcome `replicates`) and gets everything from the master;
 * promoted, it gets the client's unconfirmed sends at once.
 */
import { afterEach, expect, it } from "bun:test";
import type { Broker } from "../../src/server/broker.ts";
import { type Received, recorder, waitFor } from "../helpers/broker.ts";
import { Peers, sendAll } from "../helpers/peers.ts";

const peers = new Peers();
afterEach(() => peers.teardown());

/** Counts the client sends and ack copies a broker is given (not what its master streams). */
function countClientCopies(broker: Broker): { sends: number; acks: number } {
  const counts = { sends: 0, acks: 0 };
  const send = broker.send.bind(broker);
  const mirrorAck = broker.mirrorAck.bind(broker);
  broker.send = (...args) => {
    counts.sends++;
    return send(...args);
  };
  broker.mirrorAck = (...args) => {
    counts.acks++;
    return mirrorAck(...args);
  };
  return counts;
}

it("copies: a slave that takes its master's stream is sent no copies of sends and acks, and holds every message through its peer link", async () => {
  const [master, slave] = await peers.cluster(2, { cluster: { minInSyncReplicas: 2 } });
  master!.start();
  slave!.start();
  await waitFor(() => slave!.upstreamState === "in-sync", 10_000, "slave in sync");
  const copies = countClientCopies(slave!.broker);
  const hosts = [master!.host, slave!.host];
  const { mq: publisher } = await peers.client(hosts);
  const { mq: consumer } = await peers.client(hosts);
  expect(publisher.status().map((host) => host.role).sort()).toEqual(["master", "slave"]);

  await sendAll(publisher, "copies/v1/x", 0, 500);
  expect(slave!.live("copies/v1")).toBe(500); // confirmed with minInSyncReplicas 2: on the slave already
  const got: Received[] = [];
  await consumer.consume("copies/v1/x", recorder(got), { prefetch: 100 }).ready;
  await waitFor(() => got.length === 500, 5_000, "every message delivered");
  await waitFor(() => slave!.live("copies/v1") === 0, 5_000, "the master's removals reach the slave");
  expect(copies).toEqual({ sends: 0, acks: 0 });
});

it("copies: without cluster.peers a slave is still sent every send and ack: the client's copies are all it gets", async () => {
  const [master, slave] = await peers.cluster(2);
  master!.peers = [];
  slave!.peers = [];
  master!.start();
  slave!.start();
  const copies = countClientCopies(slave!.broker);
  const hosts = [master!.host, slave!.host];
  const { mq: publisher } = await peers.client(hosts);
  const { mq: consumer } = await peers.client(hosts);
  await waitFor(() => publisher.status().every((host) => host.connected) && consumer.status().every((host) => host.connected), 5_000);

  await sendAll(publisher, "copies/v1/x", 0, 200);
  await waitFor(() => slave!.live("copies/v1") === 200, 5_000, "the client's copies on the slave");
  const got: Received[] = [];
  await consumer.consume("copies/v1/x", recorder(got), { prefetch: 100 }).ready;
  await waitFor(() => got.length === 200, 5_000, "every message delivered");
  await waitFor(() => slave!.live("copies/v1") === 0, 5_000, "the consumer's ack copies drop the slave's copies");
  expect(copies.sends).toBe(200);
  expect(copies.acks).toBeGreaterThan(0);
});

it("copies: sends made while the master is gone reach the replicating slave once it is promoted, and are confirmed and delivered", async () => {
  const [master, slave] = await peers.cluster(2);
  master!.start();
  slave!.start();
  await waitFor(() => slave!.upstreamState === "in-sync", 10_000, "slave in sync");
  const hosts = [master!.host, slave!.host];
  const { mq: publisher } = await peers.client(hosts);
  await sendAll(publisher, "copies/v1/x", 0, 100);
  await waitFor(() => slave!.live("copies/v1") === 100, 5_000, "streamed to the slave");

  await master!.stop();
  await waitFor(() => publisher.status().find((host) => host.role === "master" && host.connected) === undefined, 5_000);
  const held = Promise.all([100, 101, 102].map((n) => publisher.send("copies/v1/x", { n })));
  slave!.broker.reload(slave!.config({ isMaster: true }));
  await held;
  expect(slave!.live("copies/v1")).toBe(103);

  const { mq: consumer } = await peers.client([slave!.host]);
  const got: Received[] = [];
  await consumer.consume("copies/v1/x", recorder(got), { prefetch: 200 }).ready;
  await waitFor(() => got.length === 103, 5_000, "every message delivered by the new master");
  expect(new Set(got.map((r) => (r.message as { n: number }).n)).size).toBe(103);
});

it("copies: a reload that empties cluster.peers on a slave tells its clients (ROLE), which copy their sends to it from then on", async () => {
  const [master, slave] = await peers.cluster(2);
  master!.start();
  slave!.start();
  await waitFor(() => slave!.upstreamState === "in-sync", 10_000, "slave in sync");
  const copies = countClientCopies(slave!.broker);
  const { mq: publisher } = await peers.client([master!.host, slave!.host]);
  await sendAll(publisher, "copies/v1/x", 0, 50);
  expect(copies.sends).toBe(0);

  slave!.peers = [];
  slave!.broker.reload(slave!.config());
  // Sends written before the client read the ROLE frame went to the master only.
  let n = 50;
  await waitFor(async () => {
    await publisher.send("copies/v1/x", { n: n++ });
    return copies.sends > 0;
  }, 5_000, "a send copied to the slave once the client knows");
  const before = copies.sends;
  await sendAll(publisher, "copies/v1/x", 1_000, 1_010);
  await waitFor(() => copies.sends === before + 10, 5_000, "every send after it copied to the slave");
});
