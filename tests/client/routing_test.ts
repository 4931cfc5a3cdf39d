/**
 * A client routes each queue to the group that owns it (brokers with a queue map): it asks the
 * seed where a queue lives once, sends to that group's brokers only, and follows a NOT_OWNER that
 * names a newer owner at once (one redirect), never failing the send. Over fake brokers
 * (tests/helpers/fake_broker.ts): no sockets, and the tests count what each broker read.
 */
import { afterEach, expect, it } from "bun:test";
import { Client, type ClientOptions } from "../../mod.ts";
import { waitFor } from "../helpers/broker.ts";
import { FakeBroker, fakeDial, type FakeMap, refuse } from "../helpers/fake_broker.ts";
import { OP } from "../../src/protocol/mod.ts";
import { testKeysDirectory } from "../helpers/keys.ts";

const clients: Client[] = [];
afterEach(async () => {
  for (const mq of clients.splice(0)) await mq.disconnect();
});

/** Two groups of one broker each, sharing `map`. */
function deployment(queues: FakeMap["queues"]): { g1: FakeBroker; g2: FakeBroker; map: FakeMap } {
  const g1 = new FakeBroker(2001);
  const g2 = new FakeBroker(2002);
  const map: FakeMap = { queues, groups: { g1: [g1.host], g2: [g2.host] } };
  for (const [broker, group] of [[g1, "g1"], [g2, "g2"]] as const) {
    broker.group = group;
    broker.map = map;
  }
  return { g1, g2, map };
}

async function seededWith(seed: FakeBroker, brokers: FakeBroker[], options: Partial<ClientOptions> = {}): Promise<Client> {
  const mq = new Client(fakeDial(brokers));
  mq.on("error", () => {});
  clients.push(mq);
  await mq.connect({ hosts: [seed.host], clientId: "routing-tester", keysDirectory: testKeysDirectory, reconnectDelayMs: 10, ...options });
  return mq;
}

const channels = (broker: FakeBroker) => broker.sends.map((send) => send.channel);

it("a client seeded with one group asks where each queue lives once and sends each queue to its owner only", async () => {
  const { g1, g2 } = deployment({ "a/v1": { group: "g1", epoch: 3 }, "b/v1": { group: "g2", epoch: 4 } });
  const mq = await seededWith(g1, [g1, g2]);
  for (let i = 0; i < 5; i++) await Promise.all([mq.send("a/v1/x", { i }), mq.send("b/v1/y", { i })]);
  // The group client of g1 is a second link to g1 (the seed link only asks the map).
  expect(channels(g1)).toEqual(Array(5).fill("a/v1/x"));
  expect(channels(g2)).toEqual(Array(5).fill("b/v1/y"));
  expect(g1.mapRequests.flat().sort()).toEqual(["a/v1", "b/v1"]);
  expect(g2.mapRequests).toEqual([]);
  expect(mq.status().map((host) => [host.host, host.group, host.connected])).toEqual([
    [g1.host, "g1", true],
    [g2.host, "g2", true],
  ]);
});

it("a stale client is redirected once: the old owner's NOT_OWNER names the new owner at a newer epoch, and the send is confirmed there", async () => {
  const { g1, g2, map } = deployment({ "q/v1": { group: "g1", epoch: 5 } });
  const mq = await seededWith(g1, [g1, g2]);
  await mq.send("q/v1/x", { n: 0 });
  expect(channels(g1)).toEqual(["q/v1/x"]);
  // The queue moves to g2; this client was not told.
  map.queues["q/v1"] = { group: "g2", epoch: 9 };
  await mq.send("q/v1/x", { n: 1 });
  // g1 read it once (refused), g2 confirmed it; the client asked no map for it.
  expect(channels(g1)).toEqual(["q/v1/x", "q/v1/x"]);
  expect(channels(g2)).toEqual(["q/v1/x"]);
  expect(g1.mapRequests).toEqual([["q/v1"]]);
  // The next sends go straight to the new owner.
  await Promise.all([1, 2, 3].map((n) => mq.send("q/v1/x", { n })));
  expect(channels(g1)).toHaveLength(2);
  expect(channels(g2)).toHaveLength(4);
});

it("a NOT_OWNER no newer than the client's map is not followed: the client asks the map again, and the send is confirmed by the owner it names", async () => {
  const { g1, g2, map } = deployment({ "q/v1": { group: "g2", epoch: 7 } });
  const mq = await seededWith(g1, [g1, g2]);
  await mq.send("q/v1/x", { n: 0 });
  expect(channels(g2)).toEqual(["q/v1/x"]);
  // g2 lags behind: it believes g1 owns the queue, at an epoch older than the client's.
  g2.map = { queues: { "q/v1": { group: "g1", epoch: 6 } }, groups: map.groups };
  map.queues["q/v1"] = { group: "g1", epoch: 8 };
  await mq.send("q/v1/x", { n: 1 });
  expect(channels(g2)).toEqual(["q/v1/x", "q/v1/x"]);
  expect(channels(g1)).toEqual(["q/v1/x"]);
  expect(g1.mapRequests).toEqual([["q/v1"], ["q/v1"]]);
});

it("sends made before any broker answered go to each queue's owner once queues turn out to follow a map", async () => {
  const { g1, g2 } = deployment({ "a/v1": { group: "g1", epoch: 1 }, "b/v1": { group: "g2", epoch: 2 } });
  g1.accepting = false;
  const mq = new Client(fakeDial([g1, g2]));
  mq.on("error", () => {});
  clients.push(mq);
  const connected = mq.connect({ hosts: [g1.host], clientId: "routing-tester", keysDirectory: testKeysDirectory, reconnectDelayMs: 10 });
  const sent = [mq.send("a/v1/x", 1), mq.send("b/v1/y", 2), mq.send("a/v1/x", 3)];
  await waitFor(() => mq.status().length === 1, 1000, "the seed link tried");
  g1.accepting = true;
  await connected;
  await Promise.all(sent);
  expect(channels(g1)).toEqual(["a/v1/x", "a/v1/x"]);
  expect(channels(g2)).toEqual(["b/v1/y"]);
});

it("without a map (no cluster.etcd) the client sends everything to its hosts and asks no map", async () => {
  const broker = new FakeBroker(2003);
  const mq = await seededWith(broker, [broker]);
  await Promise.all([mq.send("a/v1/x", 1), mq.send("b/v1/y", 2)]);
  expect(channels(broker)).toEqual(["a/v1/x", "b/v1/y"]);
  expect(broker.mapRequests).toEqual([]);
});

it("sends held back by a queue's old group (QUEUE_MOVING) go to its new group as soon as a push says it moved", async () => {
  const { g1, g2, map } = deployment({ "q/v1": { group: "g1", epoch: 5 } });
  const mq = await seededWith(g1, [g1, g2], { sendTimeoutMs: 5000 });
  await mq.send("q/v1/x", { n: 0 });
  // g1 holds the queue's sends while it switches, and would for ever (its own map stays as it
  // was): only the push frees them.
  g1.map = { queues: { ...map.queues }, groups: map.groups };
  g1.answer = refuse("QUEUE_MOVING");
  const held = mq.send("q/v1/x", { n: 1 });
  await waitFor(() => channels(g1).length === 2, 1000, "g1 refused the send");
  map.queues["q/v1"] = { group: "g2", epoch: 9 };
  g1.push([OP.MAP_INFO, null, { epoch: 9, queues: { "q/v1": map.queues["q/v1"] }, groups: map.groups }]);
  await held;
  expect(channels(g2)).toEqual(["q/v1/x"]);
});
