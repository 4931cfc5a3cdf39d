/**
 * Resource limits end to end: maxConnections, maxFrameSize and the
 * per-connection outgoing bound that keeps a stalled consumer from growing broker memory.
 */
import { afterEach, expect, it } from "bun:test";
import { Client } from "../../mod.ts";
import { encode, frame, OP } from "../../src/protocol/mod.ts";
import { PROTOCOL_VERSION } from "../../src/version.ts";
import { Session } from "../../src/server/session.ts";
import { Cleanup, clientOptions, rejection, type TestBroker, waitFor } from "../helpers/broker.ts";
import { attacker, bystander, expectFatal } from "../helpers/security.ts";
import { hello, rawFrame } from "../helpers/wire.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

it("e2e: limits: maxConnections 2: a third connection gets TOO_MANY_CONNECTIONS and a close; a freed slot is reused", async () => {
  const broker = cleanup.broker({ socketServer: { maxConnections: 2 } });
  const one = await attacker(cleanup, broker);
  await hello(one, "conn-1");
  const two = await attacker(cleanup, broker);
  await hello(two, "conn-2");

  const three = await attacker(cleanup, broker);
  const error = await three.expect(OP.ERROR);
  expect(error.slice(0, 3)).toEqual([OP.ERROR, null, "TOO_MANY_CONNECTIONS"]);
  expect(error[3]).toContain("maxConnections 2");
  await three.closed;
  expect(broker.logger.lines.some((l) => l.includes("maxConnections 2 reached;refused"))).toBe(true);

  // The two are unaffected; once one leaves, a new connection is accepted.
  two.send([OP.PING, 1]);
  await two.expect(OP.PONG);
  one.close();
  await waitFor(() => broker.broker.sessions.size === 1);
  const four = await attacker(cleanup, broker);
  await hello(four, "conn-4");
  four.send([OP.PING, 2]);
  expect(await four.expect(OP.PONG)).toEqual([OP.PONG, 2]);
});

it("e2e: limits: maxConnections: a refused peer whose hello arrives in two segments still gets TOO_MANY_CONNECTIONS", async () => {
  const broker = cleanup.broker({ socketServer: { maxConnections: 1 } });
  const one = await attacker(cleanup, broker);
  await hello(one, "holder");
  // A hello split over two TCP writes (a legal, slow or small-MTU client) as soon as connected.
  const eager = await attacker(cleanup, broker);
  const bytes = frame(encode([OP.HELLO, PROTOCOL_VERSION, { client: "eager", token: null }]));
  eager.sendRaw(bytes.subarray(0, 10));
  eager.sendRaw(bytes.subarray(10));
  await eager.closed;
  // The refusal must reach the peer; a close with unread input (RST) would discard it.
  expect(eager.buffered.map((f) => f[2])).toEqual(["TOO_MANY_CONNECTIONS"]);
});

it("e2e: limits: maxConnections: a refused connection's frames are never processed", async () => {
  const broker = cleanup.broker({ socketServer: { maxConnections: 1 } });
  const one = await attacker(cleanup, broker);
  await hello(one, "holder");
  // Spy on every session's input: the refused connection's session must never read a frame.
  const receive = Session.prototype.receive;
  const readers = new Set<Session>();
  Session.prototype.receive = function (this: Session, chunk: Uint8Array) {
    readers.add(this);
    return receive.call(this, chunk);
  };
  cleanup.defer(() => (Session.prototype.receive = receive));
  const pushy = await attacker(cleanup, broker);
  pushy.send([OP.HELLO, PROTOCOL_VERSION, { client: "pushy", token: null }]);
  await waitFor(() => pushy.buffered.some((frame) => frame[0] === OP.ERROR), 2000, "the refusal arrived");
  pushy.send([OP.PING, 3]); // sent after the refusal was written
  await pushy.closed;
  // A round trip on the holder's link, after the ping was written: the broker has read the ping by then.
  one.send([OP.PING, 4]);
  expect(await one.expect(OP.PONG)).toEqual([OP.PONG, 4]);
  expect(pushy.buffered.filter((frame) => frame[0] !== OP.ERROR)).toEqual([]); // no CHALLENGE, no PONG
  expect([...readers].filter((session) => !broker.broker.sessions.has(session))).toEqual([]);
  expect(broker.broker.sessions.size).toBe(1);
});

it("e2e: limits: maxConnections: a real client refused for capacity retries and connects when a slot frees", async () => {
  const broker = cleanup.broker({ socketServer: { maxConnections: 1 } });
  const holder = await attacker(cleanup, broker);
  await hello(holder, "holder");
  const mq = cleanup.add(new Client());
  mq.on("error", () => {});
  let connected = false;
  const connecting = mq.connect(clientOptions(broker)).then(() => (connected = true));
  connecting.catch(() => {});
  // Several attempts (reconnectDelayMs 20, max 100), all refused.
  await waitFor(() => broker.logger.lines.filter((l) => l.includes("maxConnections 1 reached;refused")).length > 1, 5000);
  expect(connected).toBe(false);
  expect(broker.logger.lines.filter((l) => l.includes("maxConnections 1 reached;refused")).length).toBeGreaterThan(1);
  holder.close();
  await connecting;
  expect(mq.isConnected()).toBe(true);
});

it("e2e: limits: maxFrameSize 2048: a larger length prefix gets FRAME_TOO_LARGE and a close; 2048 is accepted", async () => {
  const broker = cleanup.broker({ socketServer: { maxFrameSize: 2048 } });
  const other = await bystander(cleanup, broker);
  const ok = await attacker(cleanup, broker);
  const welcome = await hello(ok, "framer");
  expect(welcome.maxFrameSize).toBe(2048);
  // A SEND whose frame body is exactly 2048 bytes is read and confirmed.
  const build = (size: number) => {
    const empty = encode([OP.SEND, 1, "big/v1/1", "m-1", new Uint8Array(0)]).length;
    // The body's own CBOR length header grows from 1 to 3 bytes past 23 bytes.
    return encode([OP.SEND, 1, "big/v1/1", "m-1", new Uint8Array(size - empty - 2)]);
  };
  const exact = build(2048);
  expect(exact.length).toBe(2048);
  ok.sendRaw(rawFrame(exact));
  expect(await ok.expect(OP.OK)).toEqual([OP.OK, [1]]);

  // Announced only: refused on the header, before the body arrives.
  const announced = await attacker(cleanup, broker);
  await hello(announced, "framer-2");
  announced.sendRaw(new Uint8Array([0, 0, 0x08, 0x01])); // 2049
  await expectFatal(announced, "FRAME_TOO_LARGE", ["2049", "maxFrameSize 2048"]);

  // A whole frame one byte too large, even before hello.
  const whole = await attacker(cleanup, broker);
  whole.sendRaw(rawFrame(build(2049)));
  await expectFatal(whole, "FRAME_TOO_LARGE", ["2049"]);
  expect(broker.broker.queues.get("big/v1")!.live).toBe(1);

  // The real client refuses a send that would be too large locally, naming the limit.
  const mq = await cleanup.client(broker);
  const error = await rejection(mq.send("big/v1/1", "x".repeat(3000)));
  expect(error.code).toBe("FRAME_TOO_LARGE");
  expect(error.message).toContain("maxFrameSize 2048");
  expect(mq.isConnected()).toBe(true);
  await other.check();
});

function sessionOf(broker: TestBroker, clientId: string): Session {
  const session = [...broker.broker.sessions].find((s) => s.clientId === clientId);
  if (!session) throw new Error(`no session of ${clientId}`);
  return session as Session;
}

it("e2e: limits: a stalled consumer holds at most maxOutgoingBytes (+ one batch) of unsent frames; the rest waits in the queue", async () => {
  const MAX_OUTGOING = 65536;
  const COUNT = 20_000;
  const broker = cleanup.broker({
    socketServer: { maxOutgoingBytes: MAX_OUTGOING },
    channels: { "stall/v1": { listenerPrefetch: 65535, prefetch: 65535 } },
  });
  const other = await bystander(cleanup, broker);
  const consumer = await attacker(cleanup, broker);
  await hello(consumer, "staller");
  consumer.send([OP.LISTEN, 1, 1, "stall", "v1", ["*"], null]);
  await consumer.expect(OP.OK);
  consumer.pause(); // stops reading: the kernel buffers fill, then the broker's

  // unsentBytes changes only when the session writes (flush) or drains: sample right after both.
  const session = sessionOf(broker, "staller");
  let maxUnsent = 0;
  const sample = () => (maxUnsent = Math.max(maxUnsent, session.unsentBytes));
  const flush = session.flush.bind(session);
  const drain = session.drain.bind(session);
  session.flush = () => (flush(), sample());
  session.drain = () => (drain(), sample());

  const producer = await cleanup.client(broker, { maxPendingMessages: COUNT });
  const body = "x".repeat(1024);
  const sends: Promise<void>[] = [];
  for (let i = 0; i < COUNT; i++) sends.push(producer.send(`stall/v1/${i % 10}`, body));
  await Promise.all(sends);
  await other.check(); // the broker serves others meanwhile

  // One batch is what one burst of input (one socket read, at most 512 KiB of SENDs in Bun) turns
  // into before the session writes again: the outgoing check is made between bursts, not inside
  // one. A DELIVER of this 1 KiB body is about as large as its SEND, so the bound is
  // maxOutgoingBytes + 512 KiB (+ 64 KiB for frame overheads).
  const BOUND = MAX_OUTGOING + 512 * 1024 + 64 * 1024;
  expect(maxUnsent).toBeGreaterThan(0); // the consumer did stall
  expect(maxUnsent).toBeLessThanOrEqual(BOUND);
  const queue = broker.broker.queues.get("stall/v1")!;
  // The rest waits in the queue, not in buffers: in memory, or paged to the store past its budget.
  expect(queue.depth().ready + queue.backlog.count).toBeGreaterThan(0);
  expect(queue.depth().ready + queue.depth().inflight + queue.backlog.count).toBe(COUNT);

  // Resumed, the consumer receives all of them, and the bound still holds while it catches up:
  // a reader that resumes (or reads slowly) must not make the broker copy its backlog into
  // unsent buffers.
  const whilePublishing = maxUnsent;
  maxUnsent = 0;
  consumer.resume();
  const delivered = () => consumer.buffered.reduce((n, frame) => n + (frame[0] === OP.DELIVER ? 1 : 0), 0);
  await waitFor(() => delivered() === COUNT, 5000, "all deliveries");
  const ids = new Set(consumer.buffered.filter((f) => f[0] === OP.DELIVER).map((f) => f[3]));
  expect(ids.size).toBe(COUNT);
  // Both numbers in one assertion, so a failure shows where the bound broke.
  expect({ whilePublishing, afterResume: Math.min(maxUnsent, BOUND) === maxUnsent ? "within bound" : maxUnsent })
    .toEqual({ whilePublishing, afterResume: "within bound" });
  await other.check();
});
