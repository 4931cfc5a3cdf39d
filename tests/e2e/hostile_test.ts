import { afterEach, expect, it } from "bun:test";
import { encode, FrameBatch, OP } from "../../src/protocol/mod.ts";
import { writeAppend } from "../../src/protocol/hot_ops.ts";
import { PROTOCOL_VERSION } from "../../src/version.ts";
import type { Session } from "../../src/server/session.ts";
import { Cleanup, waitFor } from "../helpers/broker.ts";
import { attacker, bystander } from "../helpers/security.ts";
import { answerChallenge, hello, rawFrame, type Wire } from "../helpers/wire.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

// Kept over security.ts expectFatal, which does not check the ERROR's ref: these tests pin it (null, or the op's ref).
/** Expects ERROR with `code` (and `ref`, when given), then the broker closing the connection. */
async function expectFatal(wire: Wire, code: string, ref?: number | null): Promise<unknown[]> {
  const error = await wire.expect(OP.ERROR);
  expect(error[2]).toBe(code);
  if (ref !== undefined) expect(error[1]).toBe(ref);
  expect(typeof error[3]).toBe("string");
  await wire.closed;
  return error;
}

it("e2e: hostile garbage bytes get ERROR BAD_FRAME and a close", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  wire.sendRaw(rawFrame(new Uint8Array([0xff, 0xfe, 0xfd, 0xfc, 0x1f])));
  await expectFatal(wire, "BAD_FRAME", null);
  expect(broker.logger.lines.some((l) => l.includes("code=BAD_FRAME"))).toBe(true);
  await other.check();
});

it("e2e: hostile garbage after hello gets ERROR BAD_FRAME and a close", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  await hello(wire, "mallory");
  wire.sendRaw(rawFrame(new Uint8Array([0x1c, 0x1d, 0x1e])));
  await expectFatal(wire, "BAD_FRAME", null);
  await other.check();
});

it("e2e: hostile CBOR values that are not operation arrays get BAD_FRAME", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  for (const value of [42, "hello", { op: 1 }, [], ["1"], [-1], [1.5], null]) {
    const wire = await attacker(cleanup, broker);
    wire.send(value as unknown[]);
    await expectFatal(wire, "BAD_FRAME", null);
  }
  await other.check();
});

it("e2e: hostile deeply nested CBOR gets BAD_FRAME, not a crash", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  await hello(wire, "mallory");
  wire.sendRaw(rawFrame(new Uint8Array(200_000).fill(0x81))); // [[[[…]]]] 200k deep
  await expectFatal(wire, "BAD_FRAME", null);
  await other.check();
});

it("e2e: hostile CBOR headers announcing huge arrays, strings and maps get BAD_FRAME", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const huge = [0x9b, 0x5b, 0x7b, 0xbb].map((major) =>
    new Uint8Array([major, 0x00, 0x00, 0x00, 0x0f, 0xff, 0xff, 0xff, 0xff, 0x01])
  );
  huge.push(new Uint8Array([0x9a, 0xff, 0xff, 0xff, 0xff])); // array of 2^32-1 elements, 4-byte length
  for (const body of huge) {
    const wire = await attacker(cleanup, broker);
    wire.sendRaw(rawFrame(body));
    await expectFatal(wire, "BAD_FRAME", null);
  }
  await other.check();
});

it("e2e: hostile random bytes only ever get coded errors (seeded fuzz)", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  let seed = 0x2545f491;
  const random = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) / 0x100000000;
  };
  const wires: Promise<unknown>[] = [];
  for (let i = 0; i < 40; i++) {
    const body = new Uint8Array(1 + Math.floor(random() * 64)).map(() => Math.floor(random() * 256));
    const afterHello = i % 2 === 1;
    wires.push((async () => {
      const wire = await attacker(cleanup, broker);
      if (afterHello) await hello(wire, `fuzz-${i}`);
      wire.sendRaw(rawFrame(body));
      // Either a coded error and a close, or (for bytes that happen to form an op) a coded answer.
      const reply = await wire.expectAny([OP.ERROR, OP.PONG, OP.OK], 1500);
      if (reply[0] === OP.ERROR) {
        expect(["BAD_FRAME", "BAD_PROTOCOL", "BAD_REQUEST", "UNKNOWN_OP", "BAD_CHANNEL", "UNKNOWN_SUBSCRIPTION"])
          .toContain(reply[2] as string);
        expect(reply[2]).not.toBe("INTERNAL");
      }
      wire.close();
    })());
  }
  await Promise.all(wires);
  expect(broker.logger.lines.filter((l) => l.startsWith("[error"))).toEqual([]);
  await other.check();
});

it("e2e: hostile oversized length prefix gets FRAME_TOO_LARGE and a close, before any body", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  wire.sendRaw(new Uint8Array([0xff, 0xff, 0xff, 0xff])); // 4 GiB announced, nothing sent
  await expectFatal(wire, "FRAME_TOO_LARGE", null);

  const justOver = await attacker(cleanup, broker);
  await hello(justOver, "mallory");
  justOver.sendRaw(rawFrame(new Uint8Array(0), broker.broker.config.socketServer.maxFrameSize + 1));
  await expectFatal(justOver, "FRAME_TOO_LARGE", null);
  await other.check();
});

it("e2e: hostile truncated frame, then a close from the client side, leaves the broker unaffected", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const sessionsBefore = broker.broker.sessions.size;
  const wire = await attacker(cleanup, broker);
  await hello(wire, "mallory");
  await waitFor(() => broker.broker.sessions.size === sessionsBefore + 1);
  // Counts the bytes mallory's session reads, so the test knows the broker has the 40 bytes.
  const session = [...broker.broker.sessions].find((each) => each.clientId === "mallory") as Session;
  let read = 0;
  const receive = session.receive.bind(session);
  session.receive = (chunk: Uint8Array) => {
    read += chunk.length;
    receive(chunk);
  };
  const full = rawFrame(encode([OP.SEND, 1, "cut/v1/1", "m-1", encode("x".repeat(100))]));
  wire.sendRaw(full.subarray(0, 40));
  await waitFor(() => read === 40, 5000, "the broker read the 40 bytes");
  await other.check();
  expect(wire.isClosed).toBe(false); // the broker waits for the rest of the frame
  expect(session.isClosed).toBe(false);
  wire.close();
  await waitFor(() => broker.broker.sessions.size === sessionsBefore);
  expect(broker.broker.queues.get("cut/v1")).toBeUndefined(); // nothing half-read was accepted
  await other.check();
});

it("e2e: hostile frame dribbled one byte at a time is still read correctly", async () => {
  const broker = cleanup.broker();
  const wire = await attacker(cleanup, broker);
  const bytes = rawFrame(encode([OP.HELLO, PROTOCOL_VERSION, { client: "slow", token: null }]));
  for (const byte of bytes) {
    wire.sendRaw(new Uint8Array([byte]));
    await Bun.sleep(1); // the spacing is the subject: each byte arrives in a read of its own
  }
  await answerChallenge(wire, "slow");
  wire.send([OP.PING, 9]);
  expect(await wire.expect(OP.PONG)).toEqual([OP.PONG, 9]);
});

it("e2e: hostile operation before hello gets BAD_PROTOCOL and a close", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const ping = await attacker(cleanup, broker);
  ping.send([OP.PING, 3]);
  await expectFatal(ping, "BAD_PROTOCOL", 3);

  const send = await attacker(cleanup, broker);
  send.send([OP.SEND, 4, "pre/v1/1", "m-1", encode("sneaky")]);
  await expectFatal(send, "BAD_PROTOCOL", 4);
  expect(broker.broker.queues.get("pre/v1")).toBeUndefined();
  await other.check();
});

it("e2e: hostile hello with a wrong protocol version or bad options gets BAD_PROTOCOL (BAD_CLIENT_ID for a bad id) and a close", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const cases: [unknown[], string][] = [
    [[OP.HELLO, PROTOCOL_VERSION + 1, { client: "future", token: null }], "BAD_PROTOCOL"],
    [[OP.HELLO, 0, { client: "past", token: null }], "BAD_PROTOCOL"],
    [[OP.HELLO, "1", { client: "string-version", token: null }], "BAD_PROTOCOL"],
    [[OP.HELLO, PROTOCOL_VERSION, { token: null }], "BAD_PROTOCOL"],
    [[OP.HELLO, PROTOCOL_VERSION, { client: "", token: null }], "BAD_CLIENT_ID"],
    [[OP.HELLO, PROTOCOL_VERSION, { client: "x".repeat(300), token: null }], "BAD_CLIENT_ID"],
    [[OP.HELLO, PROTOCOL_VERSION, { client: "tok", token: 42 }], "BAD_PROTOCOL"],
    [[OP.HELLO, PROTOCOL_VERSION, ["client"]], "BAD_PROTOCOL"],
    [[OP.HELLO, PROTOCOL_VERSION], "BAD_PROTOCOL"],
  ];
  for (const [op, code] of cases) {
    const wire = await attacker(cleanup, broker);
    wire.send(op);
    const error = await wire.expect(OP.ERROR);
    expect([op, error[2]]).toEqual([op, code]);
    await wire.closed;
  }
  await other.check();
});

it("e2e: hostile second hello gets BAD_PROTOCOL and a close", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  await hello(wire, "twice");
  wire.send([OP.HELLO, PROTOCOL_VERSION, { client: "someone-else", token: null }]);
  await expectFatal(wire, "BAD_PROTOCOL");
  await other.check();
});

it("e2e: hostile unknown op after hello gets UNKNOWN_OP with its ref and the connection stays usable", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  await hello(wire, "newer-client");
  wire.send([99, 7, "something new"]);
  const error = await wire.expect(OP.ERROR);
  expect(error.slice(0, 3)).toEqual([OP.ERROR, 7, "UNKNOWN_OP"]);
  wire.send([OP.PING, 8]);
  expect(await wire.expect(OP.PONG)).toEqual([OP.PONG, 8]);
  // A broker-only operation sent by a client is unknown too, and harmless.
  wire.send([OP.DELIVER, 10, 1, "m", "1", 0, new Uint8Array(1), 0]);
  expect((await wire.expect(OP.ERROR))[2]).toBe("UNKNOWN_OP");
  wire.send([OP.PING, 11]);
  await wire.expect(OP.PONG);
  expect(wire.isClosed).toBe(false);
  await other.check();
});

it("e2e: hostile malformed SEND fields get BAD_REQUEST with the ref and the connection stays open", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  await hello(wire, "sloppy");
  const body = encode("payload");
  const cases: [number, unknown[]][] = [
    [21, [OP.SEND, 21, 123, "m-1", body]], // channel not a string
    [22, [OP.SEND, 22, "bad/v1/1", "", body]], // empty message id
    [23, [OP.SEND, 23, "bad/v1/1", "x".repeat(200), body]], // message id too long
    [24, [OP.SEND, 24, "bad/v1/1", 5, body]], // message id not a string
    [25, [OP.SEND, 25, "bad/v1/1", "m-2", "not bytes"]], // body not a byte string
    [26, [OP.SEND, 26, "bad/v1/1", "m-3"]], // body missing
  ];
  for (const [ref, op] of cases) {
    wire.send(op);
    const error = await wire.expect(OP.ERROR);
    expect(error.slice(0, 3)).toEqual([OP.ERROR, ref, "BAD_REQUEST"]);
  }
  wire.send([OP.SEND, "not a ref", "bad/v1/1", "m-4", body]);
  const noRef = await wire.expect(OP.ERROR);
  expect(noRef.slice(0, 3)).toEqual([OP.ERROR, null, "BAD_REQUEST"]);
  expect(broker.broker.queues.get("bad/v1")).toBeUndefined();

  // Still open and usable: a correct send is confirmed.
  wire.send([OP.SEND, 30, "bad/v1/1", "m-ok", body]);
  expect(await wire.expect(OP.OK)).toEqual([OP.OK, [30]]);
  expect(wire.isClosed).toBe(false);
  await other.check();
});

it("e2e: hostile malformed LISTEN/CONSUME/ADD_ID/ACK/NACK fields get BAD_REQUEST and the connection stays open", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  await hello(wire, "sloppy");
  const cases: unknown[][] = [
    [OP.LISTEN, 40, "sub", "e", "v1", ["1"], null],
    [OP.CONSUME, 41, 1, 5, "v1", ["1"], null],
    [OP.CONSUME, 42, 1, "e", "v1", "1", null],
    [OP.CONSUME, 43, 1, "e", "v1", ["1"], 0],
    [OP.CONSUME, 44, 1, "e", "v1", [1], null],
    [OP.ADD_ID, 45, 1, "1"],
    [OP.UNSUBSCRIBE, 46, "x"],
    [OP.PING, "x"],
  ];
  for (const op of cases) {
    wire.send(op);
    expect((await wire.expect(OP.ERROR))[2]).toBe("BAD_REQUEST");
  }
  wire.send([OP.ACK, 1, ["x"]]);
  expect((await wire.expect(OP.ERROR))[2]).toBe("BAD_REQUEST");
  wire.send([OP.NACK, 1, 1, -1]);
  expect((await wire.expect(OP.ERROR))[2]).toBe("BAD_REQUEST");
  wire.send([OP.PING, 50]);
  await wire.expect(OP.PONG);
  await other.check();
});

it("e2e: hostile peer that never reads does not stall other clients", async () => {
  const broker = cleanup.broker({ listenerPrefetch: 65535 });
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  await hello(wire, "never-reads");
  wire.send([OP.LISTEN, 1, 1, "flood", "v1", ["*"], null]);
  await wire.expect(OP.OK);
  wire.pause();
  const sender = await cleanup.client(broker);
  const big = "x".repeat(64 * 1024);
  const sends: Promise<void>[] = [];
  for (let i = 0; i < 150; i++) sends.push(sender.send("flood/v1/1", big)); // ~9.6 MiB
  await Promise.all(sends);
  await other.check();
  // The broker stopped writing to the stuck peer: what it could not take stays queued, bounded.
  const queue = broker.broker.queues.get("flood/v1")!;
  const depth = queue.depth();
  expect(depth.ready + queue.backlog.count).toBeGreaterThan(0); // in memory, or paged past the budget
  expect(depth.inflight).toBeLessThan(150);
});

it("e2e: hostile MOVE_APPEND from a client that is not a peer broker gets NOT_A_PEER and a close, read by hand or not", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const entry = { id: "m.1", queue: "moved/v1", destination: "x", body: new Uint8Array([1, 2]), created: 1, deliveries: 0 };
  // As a source master writes it (the hand-written reader takes it), and with a created time the
  // hand-written reader leaves to the generic decoder.
  const batch = new FrameBatch(64);
  writeAppend(batch, 7, entry, OP.MOVE_APPEND);
  for (const frame of [batch.take(), rawFrame(encode([OP.MOVE_APPEND, 8, "m.2", "moved/v1", "x", new Uint8Array([1]), 1.5, 0, null]))]) {
    const wire = await attacker(cleanup, broker);
    await hello(wire, "not-a-peer");
    wire.sendRaw(frame);
    const [, , , message] = await expectFatal(wire, "NOT_A_PEER") as [number, unknown, string, string];
    expect(message).toContain("not-a-peer");
  }
  expect(broker.broker.queues.has("moved/v1")).toBe(false); // nothing of it was taken
  await other.check();
});
