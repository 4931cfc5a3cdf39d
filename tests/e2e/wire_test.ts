import { afterEach, expect, it } from "bun:test";
import { encode, frame, OP } from "../../src/protocol/mod.ts";
import { PROTOCOL_VERSION, VERSION } from "../../src/version.ts";
import { Cleanup, type TestBroker, waitFor } from "../helpers/broker.ts";
import { dial, hello, type Wire } from "../helpers/wire.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

async function open(broker: TestBroker, client: string): Promise<Wire> {
  const wire = await dial(broker.port);
  cleanup.defer(() => wire.close());
  await hello(wire, client);
  return wire;
}

/** Collects the refs of OK frames until `refs` are all confirmed. */
async function expectOk(wire: Wire, refs: number[]): Promise<void> {
  const seen = new Set<number>();
  while (!refs.every((ref) => seen.has(ref))) {
    const ok = await wire.expect(OP.OK);
    for (const ref of ok[1] as number[]) seen.add(ref);
  }
}

it("e2e: wire hello is answered with WELCOME describing the broker", async () => {
  const broker = cleanup.broker({ socketServer: { maxFrameSize: 65536 } });
  const wire = await dial(broker.port);
  cleanup.defer(() => wire.close());
  const welcome = await hello(wire, "wire-a");
  expect(welcome).toMatchObject({
    serviceId: "broker-1",
    protocol: PROTOCOL_VERSION,
    role: "master",
    maxFrameSize: 65536,
    version: VERSION,
  });
});

it("e2e: wire hello with the broker token is accepted; a wrong or missing one gets AUTH_FAILED and a close", async () => {
  const broker = cleanup.broker({ socketServer: { token: "t0k" } });
  const good = await dial(broker.port);
  cleanup.defer(() => good.close());
  await hello(good, "with-token", "t0k");

  for (const token of ["nope", null]) {
    const bad = await dial(broker.port);
    cleanup.defer(() => bad.close());
    bad.send([OP.HELLO, PROTOCOL_VERSION, { client: "intruder", token }]);
    const error = await bad.expect(OP.ERROR);
    expect(error[2]).toBe("AUTH_FAILED");
    await bad.closed;
  }
});

it("e2e: wire SEND is confirmed by OK with its ref; ops batched in one write are all answered", async () => {
  const broker = cleanup.broker();
  const wire = await open(broker, "batcher");
  wire.send([OP.SEND, 1, "batch/v1/1", "b-1", encode(1)]);
  expect(await wire.expect(OP.OK)).toEqual([OP.OK, [1]]);

  const bytes: number[] = [];
  for (let ref = 2; ref <= 51; ref++) {
    bytes.push(...frame(encode([OP.SEND, ref, "batch/v1/1", `b-${ref}`, encode(ref)])));
  }
  wire.sendRaw(new Uint8Array(bytes));
  await expectOk(wire, Array.from({ length: 50 }, (_, i) => i + 2));
  expect(broker.broker.queues.get("batch/v1")!.counters.received).toBe(51);
});

it("e2e: wire a resend while the first send's commit runs (fsync) is confirmed with that commit and not stored twice", async () => {
  const broker = cleanup.broker({ durability: "fsync" });
  const wire = await open(broker, "resender");
  // One write: both frames are read before the commit that stores the first one runs.
  const first = frame(encode([OP.SEND, 1, "again/v1/1", "same-id", encode(1)]));
  const resend = frame(encode([OP.SEND, 2, "again/v1/1", "same-id", encode(1)]));
  wire.sendRaw(new Uint8Array([...first, ...resend]));
  await expectOk(wire, [1, 2]);
  const queue = broker.broker.queues.get("again/v1")!;
  expect(queue.counters.received).toBe(1);
  expect(queue.live).toBe(1);
  // After the commit, the same id is a duplicate held already.
  wire.send([OP.SEND, 3, "again/v1/1", "same-id", encode(1)]);
  await expectOk(wire, [3]);
  expect(queue.counters.received).toBe(1);
});

it("e2e: wire DELIVER carries the sender's body bytes untouched, and ACK settles it", async () => {
  const broker = cleanup.broker();
  const consumer = await open(broker, "wire-consumer");
  const producer = await open(broker, "wire-producer");
  consumer.send([OP.CONSUME, 1, 5, "raw", "v1", ["42"], null]);
  await consumer.expect(OP.OK);
  // Not CBOR at all: the broker must carry the body as opaque bytes, never decode it.
  const body = new Uint8Array([0xff, 0x00, 0xfe, 0x01, 0x80]);
  producer.send([OP.SEND, 1, "raw/v1/42", "raw-1", body]);
  await producer.expect(OP.OK);
  const deliver = await consumer.expect(OP.DELIVER);
  const [, sub, tag, messageId, destination, nbRequeues, received, created] = deliver;
  expect(sub).toBe(5);
  expect(typeof tag).toBe("number");
  expect(messageId).toBe("raw-1");
  expect(destination).toBe("42");
  expect(nbRequeues).toBe(0);
  expect(new Uint8Array(received as Uint8Array)).toEqual(body);
  expect(Math.abs((created as number) - Date.now())).toBeLessThan(2000);

  const queue = broker.broker.queues.get("raw/v1")!;
  expect(queue.live).toBe(1);
  consumer.send([OP.ACK, 5, [tag]]);
  await waitFor(() => queue.live === 0);
  expect(queue.counters.acked).toBe(1);
});

it("e2e: wire NACK requeues with nbRequeues 1 and a new delivery tag", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const wire = await open(broker, "nacker");
  wire.send([OP.CONSUME, 1, 1, "nk", "v1", ["1"], null]);
  await wire.expect(OP.OK);
  wire.send([OP.SEND, 2, "nk/v1/1", "nk-1", encode("x")]);
  const first = await wire.expect(OP.DELIVER);
  wire.send([OP.NACK, 1, first[2], 0]);
  const second = await wire.expect(OP.DELIVER);
  expect(second[3]).toBe("nk-1");
  expect(second[5]).toBe(1);
  expect(second[2]).not.toBe(first[2]);
  // An ack of the old tag is ignored; the new one is still in flight.
  wire.send([OP.ACK, 1, [first[2]]]);
  wire.send([OP.PING, 3]);
  await wire.expect(OP.PONG);
  expect(broker.broker.queues.get("nk/v1")!.depth().inflight).toBe(1);
});

it("e2e: wire acks are accepted only from the connection the delivery went to", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const owner = await open(broker, "owner");
  const thief = await open(broker, "thief");
  owner.send([OP.CONSUME, 1, 1, "own", "v1", ["1"], null]);
  thief.send([OP.CONSUME, 1, 1, "own", "v1", ["other"], null]);
  await owner.expect(OP.OK);
  await thief.expect(OP.OK);
  owner.send([OP.SEND, 2, "own/v1/1", "own-1", encode("mine")]);
  const deliver = await owner.expect(OP.DELIVER);
  // Same sub number and tag, from another connection.
  thief.send([OP.ACK, 1, [deliver[2]]]);
  thief.send([OP.NACK, 1, deliver[2], 0]);
  thief.send([OP.PING, 9]);
  await thief.expect(OP.PONG);
  const queue = broker.broker.queues.get("own/v1")!;
  expect(queue.depth().inflight).toBe(1);
  expect(queue.counters.acked).toBe(0);
  expect(queue.counters.nacked).toBe(0);
});

it("e2e: wire LISTEN/CONSUME/SEND with '*' as endpoint or version get BAD_CHANNEL with the ref", async () => {
  const broker = cleanup.broker();
  const wire = await open(broker, "channels");
  const cases: [number, unknown[]][] = [
    [1, [OP.LISTEN, 1, 1, "*", "v1", ["1"], null]],
    [2, [OP.LISTEN, 2, 2, "ep", "*", ["1"], null]],
    [3, [OP.CONSUME, 3, 3, "*", "*", ["*"], null]],
    [4, [OP.SEND, 4, "*/v1/1", "c-1", encode(1)]],
    [5, [OP.SEND, 5, "ep/*/1", "c-2", encode(1)]],
    [6, [OP.SEND, 6, "ep/v1", "c-3", encode(1)]],
    [7, [OP.LISTEN, 7, 7, "ep", "v1", ["a/b"], null]],
    [8, [OP.LISTEN, 8, 8, "ep", "v1", ["a b"], null]],
  ];
  for (const [ref, op] of cases) {
    wire.send(op);
    const error = await wire.expect(OP.ERROR);
    expect(error.slice(0, 3)).toEqual([OP.ERROR, ref, "BAD_CHANNEL"]);
  }
  // None of the refused registrations exists: ADD_ID on them is refused too.
  wire.send([OP.ADD_ID, 9, 1, ["2"]]);
  expect((await wire.expect(OP.ERROR)).slice(0, 3)).toEqual([OP.ERROR, 9, "UNKNOWN_SUBSCRIPTION"]);
  wire.send([OP.PING, 10]);
  await wire.expect(OP.PONG);
});

it("e2e: wire ADD_ID with a bad id gets BAD_CHANNEL and changes nothing", async () => {
  const broker = cleanup.broker();
  const wire = await open(broker, "ids");
  wire.send([OP.LISTEN, 1, 1, "ids", "v1", ["1"], null]);
  await wire.expect(OP.OK);
  wire.send([OP.ADD_ID, 2, 1, ["ok", "bad/id"]]);
  expect((await wire.expect(OP.ERROR)).slice(0, 3)).toEqual([OP.ERROR, 2, "BAD_CHANNEL"]);
  wire.send([OP.SEND, 3, "ids/v1/ok", "ids-1", encode("to ok")]);
  await wire.expect(OP.OK);
  expect(broker.broker.queues.get("ids/v1")!.waitingById().get("ok")).toBe(1);
});

it("e2e: wire duplicate subscription id gets DUPLICATE_SUBSCRIPTION; unknown ones UNKNOWN_SUBSCRIPTION", async () => {
  const broker = cleanup.broker();
  const wire = await open(broker, "subs");
  wire.send([OP.CONSUME, 1, 1, "subs", "v1", ["1"], null]);
  await wire.expect(OP.OK);
  wire.send([OP.LISTEN, 2, 1, "subs", "v1", ["2"], null]);
  expect((await wire.expect(OP.ERROR)).slice(0, 3)).toEqual([OP.ERROR, 2, "DUPLICATE_SUBSCRIPTION"]);
  wire.send([OP.REMOVE_ID, 3, 99, ["1"]]);
  expect((await wire.expect(OP.ERROR)).slice(0, 3)).toEqual([OP.ERROR, 3, "UNKNOWN_SUBSCRIPTION"]);
  wire.send([OP.UNSUBSCRIBE, 4, 99]);
  expect((await wire.expect(OP.ERROR)).slice(0, 3)).toEqual([OP.ERROR, 4, "UNKNOWN_SUBSCRIPTION"]);
  wire.send([OP.UNSUBSCRIBE, 5, 1]);
  expect(await wire.expect(OP.OK)).toEqual([OP.OK, [5]]);
  // After UNSUBSCRIBE nothing is delivered: the message waits.
  wire.send([OP.SEND, 6, "subs/v1/1", "subs-1", encode(1)]);
  await wire.expect(OP.OK);
  expect(broker.broker.queues.get("subs/v1")!.depth().waiting).toBe(1);
});

it("e2e: wire SEND with an already seen message id is confirmed but queued once", async () => {
  const broker = cleanup.broker();
  const wire = await open(broker, "resender");
  wire.send([OP.SEND, 1, "dedup/v1/1", "same-id", encode("first")]);
  wire.send([OP.SEND, 2, "dedup/v1/1", "same-id", encode("resent")]);
  await expectOk(wire, [1, 2]);
  wire.send([OP.CONSUME, 3, 1, "dedup", "v1", ["1"], null]);
  const deliver = await wire.expect(OP.DELIVER);
  expect(deliver[3]).toBe("same-id");
  wire.send([OP.ACK, 1, [deliver[2]]]);
  const queue = broker.broker.queues.get("dedup/v1")!;
  await waitFor(() => queue.live === 0);
  expect(queue.counters.received).toBe(1);
  expect(queue.counters.delivered).toBe(1);
});

it("e2e: wire SEND to a full broker queue gets QUEUE_FULL with the ref", async () => {
  const broker = cleanup.broker({ maxMessagesPerQueue: 1 });
  const wire = await open(broker, "filler");
  wire.send([OP.SEND, 1, "qf/v1/1", "qf-1", encode(1)]);
  await wire.expect(OP.OK);
  wire.send([OP.SEND, 2, "qf/v1/1", "qf-2", encode(2)]);
  expect((await wire.expect(OP.ERROR)).slice(0, 3)).toEqual([OP.ERROR, 2, "QUEUE_FULL"]);
  wire.send([OP.PING, 3]);
  await wire.expect(OP.PONG);
});

it("e2e: wire PING gets PONG with the same ref", async () => {
  const broker = cleanup.broker();
  const wire = await open(broker, "pinger");
  wire.send([OP.PING, 123456]);
  expect(await wire.expect(OP.PONG)).toEqual([OP.PONG, 123456]);
});

it("e2e: wire errors for HELLO/ACK/NACK (which carry no ref) have ref null", async () => {
  const broker = cleanup.broker({ socketServer: { token: "t0k" } });
  const wire = await dial(broker.port);
  cleanup.defer(() => wire.close());
  await hello(wire, "acker", "t0k");
  // ACK and NACK carry a sub id where other ops carry their ref; echoing it as a ref settles
  // (rejects) whichever unrelated request of that client happens to have that ref.
  wire.send([OP.NACK, 7, 1, -1]);
  expect((await wire.expect(OP.ERROR)).slice(0, 3)).toEqual([OP.ERROR, null, "BAD_REQUEST"]);
  wire.send([OP.ACK, 8, "not a list"]);
  expect((await wire.expect(OP.ERROR)).slice(0, 3)).toEqual([OP.ERROR, null, "BAD_REQUEST"]);
  // HELLO carries the protocol version there, not a ref.
  const refused = await dial(broker.port);
  cleanup.defer(() => refused.close());
  refused.send([OP.HELLO, PROTOCOL_VERSION, { client: "intruder", token: "wrong" }]);
  expect((await refused.expect(OP.ERROR)).slice(0, 3)).toEqual([OP.ERROR, null, "AUTH_FAILED"]);
});

it("e2e: wire closing a consumer connection requeues its deliveries to another connection at once", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const first = await open(broker, "first");
  first.send([OP.CONSUME, 1, 1, "rq", "v1", ["1"], null]);
  await first.expect(OP.OK);
  first.send([OP.SEND, 2, "rq/v1/1", "rq-1", encode("x")]);
  await first.expect(OP.DELIVER);
  const second = await open(broker, "second");
  second.send([OP.CONSUME, 1, 1, "rq", "v1", ["1"], null]);
  await second.expect(OP.OK);
  first.close();
  const deliver = await second.expect(OP.DELIVER, 1000);
  expect(deliver[3]).toBe("rq-1");
  expect(deliver[5]).toBe(1);
});
