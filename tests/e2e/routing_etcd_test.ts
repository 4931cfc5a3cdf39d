/**
 * The routing client (mod.ts's Client) against queues spread over groups: real etcd, one
 * in-process broker per group (the master of its group), all sharing one prefix. A client seeded
 * with one group's broker reaches the queues of every group; a queue whose owner changes in etcd
 * (what a move's final switch writes) takes its running consumers and its next sends to the new
 * owner, whether the seed's MAP_INFO push or the old owner's NOT_OWNER reaches the client first;
 * rules and formats refuse the same way on every group; a listen works on another group's queue.
 *
 * The clients that tests look into dial through `tap()`: every frame each link wrote and read,
 * decoded, with the broker port it went to or came from.
 */
import { afterAll, afterEach, beforeAll, expect, it } from "bun:test";
import { Etcd3 } from "etcd3";
import { Client, type ClientOptions, type KittenError } from "../../mod.ts";
import { OP } from "../../src/protocol/mod.ts";
import { errorsFrom, pushesOf, sendsTo, tap, type Tapped } from "../helpers/dial_tap.ts";
import {
  Cleanup,
  clientOptions,
  drain,
  listenRecorder,
  type Received,
  recorder,
  rejection,
  startTestBroker,
  type TestBroker,
  waitFor,
} from "../helpers/broker.ts";
import { testPrefix } from "../helpers/election.ts";
import { type EtcdCluster, startEtcd } from "../helpers/etcd.ts";
import { type Relay, startRelay } from "../helpers/relay.ts";

/** Each test starts brokers and waits for elections and etcd watches: more than bun's 5 s default. */
const TEST_TIMEOUT_MS = 30_000;

const cleanup = new Cleanup();
let etcd: EtcdCluster;
/** The test's own etcd client: it writes the map as a move's final switch does. */
let raw: Etcd3;

beforeAll(async () => {
  etcd = await startEtcd();
  raw = new Etcd3({ hosts: etcd.endpoints });
}, TEST_TIMEOUT_MS);

/** Relays closed after the brokers stopped (a broker reaching etcd through one stops cleanly). */
const relays: Relay[] = [];

afterEach(async () => {
  await cleanup.run();
  for (const relay of relays.splice(0)) await relay.close();
});

afterAll(async () => {
  raw?.close();
  await etcd?.cleanup();
}, TEST_TIMEOUT_MS);

/** A group's broker; `host` names its serviceId (the JWT audience), so a client can be seeded with it. */
interface Member extends TestBroker {
  readonly group: string;
}

interface Deployment {
  prefix: string;
  members: Member[];
}

interface DeployOptions {
  /** etcd as some groups' brokers reach it (default: etcd itself). */
  endpoints?: Record<string, string[]>;
  leaseTtlSeconds?: number;
}

/** One broker per group, each the master of its group, sharing one etcd prefix and `extra` config. */
async function deploy(names: string[], extra: Record<string, unknown> = {}, options: DeployOptions = {}): Promise<Deployment> {
  const prefix = testPrefix();
  const leaseTtlSeconds = options.leaseTtlSeconds ?? 2;
  const members = names.map((group): Member => {
    const endpoints = options.endpoints?.[group] ?? etcd.endpoints;
    const started = cleanup.add(startTestBroker({
      serviceId: `${group}-1`,
      ...extra,
      cluster: { peers: [], minInSyncReplicas: 1, group, etcd: { endpoints, leaseTtlSeconds, prefix } },
    }));
    return { ...started, group, host: `127.0.0.1:${started.port}@${group}-1` };
  });
  await waitFor(() => members.every((m) => m.broker.isMaster), 10_000, "every group elects its master");
  // Each broker sees every group's member key (a group named by a placed queue alone lists no broker).
  await waitFor(
    () => members.every((m) => names.every((group) => (m.broker.placement.status()!.groups[group]?.brokers.length ?? 0) > 0)),
    10_000,
    "every broker sees every group's broker",
  );
  // channels[q].group entries are placed as soon as each broker has read the map.
  const configured = Object.keys((extra.channels ?? {}) as Record<string, unknown>);
  await waitFor(
    () => members.every((m) => configured.every((queue) => m.broker.placement.known([queue]).queues[queue] !== undefined)),
    10_000,
    "every configured queue placed",
  );
  return { prefix, members };
}

/**
 * Moves `queue` to `group` the way a move's last step does: one put of its map key. Returns once
 * the brokers of `waitOn` (default: every group) see the new owner.
 */
async function switchOwner(deployment: Deployment, queue: string, group: string, waitOn?: Member[]): Promise<number> {
  const put = await raw.put(`${deployment.prefix}queues/${queue}`).value(JSON.stringify({ group }));
  const epoch = Number(put.header.revision);
  await waitFor(
    () => (waitOn ?? deployment.members).every((m) => sees(m, queue, epoch)),
    10_000,
    `the brokers see ${queue} on ${group}`,
  );
  return epoch;
}

/** True once `member` knows `queue` at map epoch `epoch`. */
function sees(member: Member, queue: string, epoch: number): boolean {
  return member.broker.placement.known([queue]).queues[queue]?.epoch === epoch;
}

/** A client dialling through `tap(log)`, seeded with `seed`. */
async function tapped(seed: { host: string }, log: Tapped[], options: Partial<ClientOptions> = {}): Promise<Client> {
  const mq = cleanup.add(new Client(tap(log)));
  await mq.connect(clientOptions(seed, options));
  return mq;
}

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);
const bodies = (got: Received[]) => got.map((r) => r.message);

it("e2e: routing: a client seeded with g1 sends to queues of g1 and g2, a client seeded with g2 consumes both: each message once, held by its owner only", async () => {
  const { members: [g1, g2] } = await deploy(["g1", "g2"], { channels: { "a/v1": { group: "g1" }, "b/v1": { group: "g2" } } });
  const producer = await cleanup.client(g1!, { clientId: "producer" });
  const N = 20;
  // Sent before anyone consumes: the messages wait on their owner, and only there.
  await Promise.all(range(N).flatMap((i) => [producer.send("a/v1/x", { q: "a", i }), producer.send("b/v1/x", { q: "b", i })]));
  const onG1 = g1!.broker.queues.get("a/v1")!;
  const onG2 = g2!.broker.queues.get("b/v1")!;
  expect(onG1.depth().waiting).toBe(N);
  expect(onG2.depth().waiting).toBe(N);
  expect(g1!.broker.queues.has("b/v1")).toBe(false);
  expect(g2!.broker.queues.has("a/v1")).toBe(false);

  const consumer = await cleanup.client(g2!, { clientId: "consumer" });
  const got: Received[] = [];
  await Promise.all([consumer.consume("a/v1/x", recorder(got)).ready, consumer.consume("b/v1/x", recorder(got)).ready]);
  await waitFor(() => got.length === 2 * N, 5000, "every message delivered");
  await drain(producer, "a/v1/x", got);
  await drain(producer, "b/v1/x", got);
  // Exactly once, and in send order within each queue.
  expect(bodies(got).filter((m) => (m as { q: string }).q === "a")).toEqual(range(N).map((i) => ({ q: "a", i })));
  expect(bodies(got).filter((m) => (m as { q: string }).q === "b")).toEqual(range(N).map((i) => ({ q: "b", i })));
  expect(new Set(got.map((r) => r.info.messageId)).size).toBe(2 * N);

  // Each owner received its queue's messages (and the drain marker) and had them all acked; the
  // other broker never made that queue.
  await waitFor(() => onG1.held === 0 && onG2.held === 0, 5000, "every message acked on its owner");
  expect([onG1.counters.received, onG1.counters.acked]).toEqual([N + 1, N + 1]);
  expect([onG2.counters.received, onG2.counters.acked]).toEqual([N + 1, N + 1]);
  expect(g1!.broker.queues.has("b/v1")).toBe(false);
  expect(g2!.broker.queues.has("a/v1")).toBe(false);

  // Both clients hold links to both groups' brokers, whichever they were seeded with.
  const links = (mq: Client) => mq.status().map((s) => [s.host, s.group, s.connected, s.master]).sort();
  const expected = [[g1!.host, "g1", true, true], [g2!.host, "g2", true, true]].sort();
  expect(links(producer)).toEqual(expected);
  expect(links(consumer)).toEqual(expected);
}, TEST_TIMEOUT_MS);

it("e2e: routing: the owner of a queue changes in etcd and the seeds push it first: a running consumer moves to the new owner, later sends go straight there", async () => {
  const deployment = await deploy(["g1", "g2"], { channels: { "m/v1": { group: "g1" } } });
  const [g1, g2] = deployment.members;
  const consumerLog: Tapped[] = [];
  const publisherLog: Tapped[] = [];
  // The consumer hears of the change from g1 (the old owner), the publisher from g2 (the new one).
  const consumer = await tapped(g1!, consumerLog, { clientId: "mover-consumer" });
  const publisher = await tapped(g2!, publisherLog, { clientId: "mover-publisher" });
  const got: Received[] = [];
  await consumer.consume("m/v1/x", recorder(got)).ready;
  for (const i of range(5)) await publisher.send("m/v1/x", i);
  await waitFor(() => got.length === 5);
  const before = g1!.broker.queues.get("m/v1")!;
  expect(before.counters.received).toBe(5);

  await switchOwner(deployment, "m/v1", "g2");
  // Both seeds push the change to the clients that asked MAP.
  await waitFor(() => pushesOf(consumerLog, "m/v1", "g2").length > 0 && pushesOf(publisherLog, "m/v1", "g2").length > 0, 5000, "both clients told");
  const sentBefore = publisherLog.length;

  const rejected: unknown[] = [];
  await Promise.all(range(5, 5).map((i) => publisher.send("m/v1/x", i).catch((error) => rejected.push(error))));
  expect(rejected).toEqual([]);
  // Told before sending: every send went to g2 only, and none was refused.
  const after = publisherLog.slice(sentBefore);
  expect(sendsTo(after, g1!.port, "m/v1")).toHaveLength(0);
  expect(sendsTo(after, g2!.port, "m/v1")).toHaveLength(5);
  expect(errorsFrom(publisherLog, g1!.port, "NOT_OWNER")).toHaveLength(0);
  const moved = g2!.broker.queues.get("m/v1")!;
  expect(moved.counters.received).toBe(5);
  expect(before.counters.received).toBe(5);

  // The consumer left g1 and registered on g2, which delivers what was sent after the switch.
  await waitFor(() => got.length === 10, 5000, "the sends after the switch delivered");
  await drain(publisher, "m/v1/x", got);
  expect(bodies(got)).toEqual(range(10));
  expect(consumerLog.some((t) => t.dir === "out" && t.port === g1!.port && t.frame[0] === OP.UNSUBSCRIBE)).toBe(true);
  const deliveredBy = (port: number) => consumerLog.filter((t) => t.dir === "in" && t.port === port && t.frame[0] === OP.DELIVER).length;
  expect(deliveredBy(g2!.port)).toBe(6); // 5 and the drain marker
  expect(deliveredBy(g1!.port)).toBe(5);
  await waitFor(() => moved.held === 0, 5000, "acked on the new owner");
}, TEST_TIMEOUT_MS);

it("e2e: routing: the owner of a queue changes in etcd and no push reaches the publisher: the old owner's NOT_OWNER redirects every send once, concurrent sends included, none rejected", async () => {
  const deployment = await deploy(["g1", "g2", "g3"], { channels: { "m/v1": { group: "g1" }, "idle/v1": { group: "g3" } } });
  const [g1, g2, g3] = deployment.members;
  // The publisher's seed is g3, through a relay that the test freezes: a seed that stopped
  // answering, so no MAP_INFO push and no MAP answer reaches the publisher any more.
  const relay = await startRelay(g3!.port);
  relays.push(relay);
  const log: Tapped[] = [];
  const publisher = await tapped({ host: relay.host("g3-1") }, log, { clientId: "stale-publisher", sendTimeoutMs: 5000 });
  // The consumer follows the map through its own seed (g2).
  const consumer = await cleanup.client(g2!, { clientId: "stale-consumer" });
  const got: Received[] = [];
  await consumer.consume("m/v1/x", recorder(got)).ready;
  await publisher.send("m/v1/x", 0);
  await waitFor(() => got.length === 1);
  const before = g1!.broker.queues.get("m/v1")!;
  expect(before.counters.received).toBe(1);

  relay.freeze();
  const epoch = await switchOwner(deployment, "m/v1", "g2");
  const N = 20;
  const results = await Promise.allSettled(range(N, 1).map((i) => publisher.send("m/v1/x", i)));
  expect(results.filter((r) => r.status === "rejected").map((r) => String((r as PromiseRejectedResult).reason))).toEqual([]);
  // Every send went to g1 once (all were written before the first refusal came back), was refused
  // there naming g2 at the new epoch, and went to g2 once.
  const refusals = errorsFrom(log, g1!.port, "NOT_OWNER");
  expect(refusals).toHaveLength(N);
  for (const refusal of refusals) {
    expect(refusal[4]).toEqual({ queue: "m/v1", group: "g2", brokers: [`127.0.0.1:${g2!.port}@g2-1`], epoch });
  }
  expect(sendsTo(log, g1!.port, "m/v1")).toHaveLength(N + 1);
  expect(sendsTo(log, g2!.port, "m/v1")).toHaveLength(N);
  expect(pushesOf(log, "m/v1", "g2")).toHaveLength(0);
  expect(g2!.broker.queues.get("m/v1")!.counters.received).toBe(N);
  expect(before.counters.received).toBe(1); // the old owner took none of them (it may drop the queue once moved away)

  // Redirected once: the next send goes straight to g2.
  await publisher.send("m/v1/x", N + 1);
  expect(errorsFrom(log, g1!.port, "NOT_OWNER")).toHaveLength(N);
  expect(sendsTo(log, g2!.port, "m/v1")).toHaveLength(N + 1);

  // The consumer moved with the map: it gets every send after the switch, once each.
  await waitFor(() => got.length === N + 2, 5000, "the sends after the switch delivered");
  expect(bodies(got).slice(1).sort((a, b) => (a as number) - (b as number))).toEqual(range(N + 1, 1));
  expect(bodies(got).at(-1)).toBe(N + 1);
}, TEST_TIMEOUT_MS);

it("e2e: routing: the new owner has not seen the switch yet: a consumer its seed moved there is refused, asks again now and then, and takes the messages once the owner catches up", async () => {
  // g2 reaches etcd through a relay the test freezes: it serves clients, but its map stands still.
  const etcdPort = Number(new URL(etcd.endpoints[0]!).port);
  const etcdRelay = await startRelay(etcdPort);
  relays.push(etcdRelay);
  const deployment = await deploy(["g1", "g2"], { channels: { "m/v1": { group: "g1" } } }, {
    endpoints: { g2: [`http://127.0.0.1:${etcdRelay.port}`] },
    leaseTtlSeconds: 5, // g2 keeps its mastership through the freeze
  });
  const [g1, g2] = deployment.members;
  const log: Tapped[] = [];
  const consumer = await tapped(g1!, log, { clientId: "lag-consumer" });
  const got: Received[] = [];
  await consumer.consume("m/v1/x", recorder(got)).ready;
  const publisher = await cleanup.client(g1!, { clientId: "lag-publisher" });
  await publisher.send("m/v1/x", 0);
  await waitFor(() => got.length === 1);

  etcdRelay.freeze();
  const epoch = await switchOwner(deployment, "m/v1", "g2", [g1!]);
  // g1 tells the consumer, which goes to g2; g2, behind, refuses naming g1 at the old epoch.
  await waitFor(() => pushesOf(log, "m/v1", "g2").length > 0, 5000, "the consumer told");
  await waitFor(() => errorsFrom(log, g2!.port, "NOT_OWNER").length > 0, 5000, "g2 refuses the registration");
  const first = performance.now();
  const refusal = errorsFrom(log, g2!.port, "NOT_OWNER")[0]!;
  expect((refusal[4] as { group: string; epoch: number }).group).toBe("g1");
  expect((refusal[4] as { group: string; epoch: number }).epoch).toBeLessThan(epoch);
  expect(sees(g2!, "m/v1", epoch)).toBe(false);
  // Refused again and again while g2 is behind, but after a pause each time (100 ms), not at once.
  await waitFor(() => errorsFrom(log, g2!.port, "NOT_OWNER").length >= 4, 5000, "three more refusals");
  expect(performance.now() - first).toBeGreaterThanOrEqual(250);
  expect(errorsFrom(log, g2!.port, "NOT_OWNER").length).toBeLessThan(10);

  // g2's links to etcd drop and come back: it catches up, and the consumer's next try is taken.
  etcdRelay.cut();
  await waitFor(() => sees(g2!, "m/v1", epoch), 10_000, "g2 sees the switch");
  expect(g2!.broker.isMaster).toBe(true);
  for (const i of range(3, 1)) await publisher.send("m/v1/x", i);
  await waitFor(() => got.length === 4, 5000, "the sends after the switch delivered");
  await drain(publisher, "m/v1/x", got);
  expect(bodies(got)).toEqual(range(4));
  expect(g2!.broker.queues.get("m/v1")!.counters.received).toBe(4); // 3 and the drain marker
}, TEST_TIMEOUT_MS);

it("e2e: routing: a queue placed on a group with no live broker: sends time out and subscriptions wait, asking the seed again only every so often", async () => {
  const { members: [g1] } = await deploy(["g1"], { channels: { "orphan/v1": { group: "g9" } } });
  const log: Tapped[] = [];
  const mq = await tapped(g1!, log, { clientId: "orphan-client", sendTimeoutMs: 1000 });
  const errors: unknown[] = [];
  const sub = mq.consume("orphan/v1/1", recorder([], { errors }));
  const started = performance.now();
  const error = await rejection(mq.send("orphan/v1/1", "lost"));
  expect(error.code).toBe("TIMEOUT");
  expect(performance.now() - started).toBeGreaterThanOrEqual(900);
  // The seed names the owner, g9, and no broker of it: the client asks again after a pause
  // (100 ms), not at once; the send and the consume share each request.
  const asked = log.filter((t) => t.dir === "out" && t.frame[0] === OP.MAP);
  expect(asked.length).toBeGreaterThan(1);
  expect(asked.length).toBeLessThanOrEqual(15);
  const answer = log.find((t) => t.dir === "in" && t.frame[0] === OP.MAP_INFO && t.frame[1] === asked[0]!.frame[1])!;
  expect((answer.frame[2] as { queues: Record<string, { group: string }> }).queues["orphan/v1"]!.group).toBe("g9");
  // The consume waits for a broker of g9; nothing was refused.
  expect(errors).toEqual([]);
  expect(sub.closed).toBe(false);
  expect(g1!.broker.queues.has("orphan/v1")).toBe(false);
}, TEST_TIMEOUT_MS);

const RULES = [
  { client: "app-*", read: ["ra/*", "rb/*", "fa/*", "fb/*", "!xa/*", "!xb/*"], write: ["wa/*", "wb/*", "fa/*", "fb/*"] },
];
const FORMAT = { id: ["int", "min", 1], paid: ["binary", "toBoolean"] };

it("e2e: routing: rules and a channel format refuse the same way whichever group owns the queue", async () => {
  const { members: [g1, g2] } = await deploy(["g1", "g2"], {
    rules: RULES,
    channels: {
      "ra/v1": { group: "g1" }, "rb/v1": { group: "g2" }, // read only
      "wa/v1": { group: "g1" }, "wb/v1": { group: "g2" }, // write only
      "na/v1": { group: "g1" }, "nb/v1": { group: "g2" }, // neither
      "fa/v1": { group: "g1", map: FORMAT }, "fb/v1": { group: "g2", map: FORMAT },
      "xa/v1": { group: "g1" }, "xb/v1": { group: "g2" }, // exclusive read
    },
  });
  const log: Tapped[] = [];
  const app = await tapped(g1!, log, { clientId: "app-1" });
  const pairs = [["a", g1!], ["b", g2!]] as const;

  // A send without a write grant: refused by the owner, NOT_ALLOWED naming client, channel and write.
  for (const [side, owner] of pairs) {
    const error = await rejection(app.send(`r${side}/v1/1`, { id: 1 }));
    expect(error.code).toBe("NOT_ALLOWED");
    expect(error.details).toEqual({ client: "app-1", channel: `r${side}/v1/1`, direction: "write" });
    expect(errorsFrom(log, owner.port, "NOT_ALLOWED").length).toBeGreaterThan(0);
  }
  // The two refusals say the same thing, but for the queue's name.
  const [fromG1, fromG2] = errorsFrom(log, g1!.port, "NOT_ALLOWED").concat(errorsFrom(log, g2!.port, "NOT_ALLOWED"));
  expect(String(fromG2![3]).replaceAll("rb/", "ra/")).toBe(String(fromG1![3]));

  // A consume without a read grant: the handler and ready both get NOT_ALLOWED naming read.
  for (const side of ["a", "b"]) {
    const errors: unknown[] = [];
    const sub = app.consume(`w${side}/v1/1`, recorder([], { errors }));
    const error = await rejection(sub.ready);
    expect(error.code).toBe("NOT_ALLOWED");
    expect(error.details).toEqual({ client: "app-1", channel: `w${side}/v1/1`, direction: "read" });
    expect(errors).toEqual([error]);
  }

  // A queue the client may neither read nor write: refused whichever group owns it (by the seed's
  // MAP, or by the owner when a MAP_INFO push named the queue's owner already).
  for (const side of ["a", "b"]) {
    const error = await rejection(app.send(`n${side}/v1/1`, { id: 1 }));
    expect(error.code).toBe("NOT_ALLOWED");
    expect(error.message).toContain(`"app-1"`);
    expect(error.message).toContain(`n${side}/v1`);
  }
  const other = await cleanup.client(g2!, { clientId: "app-2" });
  for (const side of ["a", "b"]) {
    const error = await rejection(other.send(`n${side}/v1/1`, { id: 1 }));
    expect(error.code).toBe("NOT_ALLOWED");
  }

  // A body that does not match the queue's format: BAD_FORMAT with the same issues on both groups;
  // a matching one is converted the same way.
  const issues: unknown[] = [];
  for (const [side, owner] of pairs) {
    const error = await rejection(app.send(`f${side}/v1/1`, { id: 0, paid: 1 }));
    expect(error.code).toBe("BAD_FORMAT");
    expect(error.message).toContain(`"f${side}/v1"`);
    issues.push(error.details);
    expect(errorsFrom(log, owner.port, "BAD_FORMAT")).toHaveLength(1);
  }
  expect(issues[0]).toEqual(issues[1]);
  expect((issues[0] as { field: string }[]).map((issue) => issue.field)).toEqual(["id"]);
  const converted: Received[] = [];
  await app.consume({ endpoint: "fa", version: "v1", ids: ["1"] }, recorder(converted)).ready;
  await app.consume({ endpoint: "fb", version: "v1", ids: ["1"] }, recorder(converted)).ready;
  await app.send("fa/v1/1", { id: 3, paid: 1 });
  await app.send("fb/v1/1", { id: 3, paid: 1 });
  await waitFor(() => converted.length === 2);
  expect(bodies(converted)).toEqual([{ id: 3, paid: true }, { id: 3, paid: true }]);
  expect(g2!.broker.queues.get("fa/v1")).toBeUndefined();
  expect(g1!.broker.queues.get("fb/v1")).toBeUndefined();

  // An exclusive id belongs to its first reader on the owner, whichever seed the second one used.
  await app.consume("xa/v1/1", recorder([])).ready;
  await app.consume("xb/v1/1", recorder([])).ready;
  for (const side of ["a", "b"]) {
    const error = await rejection(other.consume(`x${side}/v1/1`, recorder([])).ready);
    expect(error.code).toBe("EXCLUSIVE_TAKEN");
  }

  // A client no rule names is refused by either group's broker.
  for (const seed of [g1!, g2!]) {
    const stranger = new Client();
    cleanup.add(stranger);
    const error = await rejection(stranger.connect(clientOptions(seed, { clientId: "stranger" })));
    expect((error as KittenError).code).toBe("UNKNOWN_CLIENT");
  }
}, TEST_TIMEOUT_MS);

it("e2e: routing: listen on a queue the other group owns: every listening clientId gets each message", async () => {
  const { members: [g1, g2] } = await deploy(["g1", "g2"], { channels: { "l/v1": { group: "g2" } } });
  const heardA: Received[] = [];
  const heardB: Received[] = [];
  const a = await cleanup.client(g1!, { clientId: "listener-a" });
  const b = await cleanup.client(g1!, { clientId: "listener-b" });
  await a.listen({ endpoint: "l", version: "v1", ids: ["*"] }, listenRecorder(heardA)).ready;
  await b.listen("l/v1/2", listenRecorder(heardB)).ready;
  const sender = await cleanup.client(g1!, { clientId: "listen-sender" });
  for (const i of range(6)) await sender.send(`l/v1/${1 + (i % 2)}`, i);
  await waitFor(() => heardA.length === 6 && heardB.length === 3, 5000, "every listener heard its messages");
  // A last message both hear: whatever was queued before it (a duplicate) has arrived by then.
  await sender.send("l/v1/2", "end");
  await waitFor(() => heardA.length === 7 && heardB.length === 4, 5000, "the last message heard");
  expect(bodies(heardA)).toEqual([...range(6), "end"]);
  expect(bodies(heardB)).toEqual([1, 3, 5, "end"]);
  expect(heardA.map((r) => r.info.channel.id)).toEqual(["1", "2", "1", "2", "1", "2", "2"]);
  // The owner holds the queue; the seed broker never made it.
  const queue = g2!.broker.queues.get("l/v1")!;
  expect(queue.counters.received).toBe(7);
  await waitFor(() => queue.held === 0, 5000, "listener deliveries acked on the owner");
  expect(g1!.broker.queues.has("l/v1")).toBe(false);
}, TEST_TIMEOUT_MS);
