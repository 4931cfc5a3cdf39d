import { afterEach, expect, it, spyOn } from "bun:test";
import { createServer } from "node:net";
import { client, KittenError } from "../../mod.ts";
import { OP } from "../../src/protocol/mod.ts";
import { testKeysDirectory } from "../helpers/keys.ts";
import {
  Cleanup,
  freePort,
  listenRecorder,
  type Received,
  recorder,
  rejection,
  sleep,
  startTestBroker,
  waitFor,
} from "../helpers/broker.ts";
import { dial, hello } from "../helpers/wire.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

const fast = { reconnectDelayMs: 10, maxReconnectDelayMs: 50 };
let ids = 0;
const clientId = () => `client-test-${++ids}`;

it("e2e: client calls made before connect() are queued and delivered", async () => {
  const broker = cleanup.broker();
  const mq = cleanup.add(client());
  const got: Received[] = [];
  const heard: Received[] = [];
  const worker = mq.consume("early/v1/1", recorder(got));
  const sub = mq.listen({ endpoint: "early", version: "v1", ids: ["x"] }, listenRecorder(heard));
  const added = sub.addId("y");
  const sent = [mq.send("early/v1/1", "first"), mq.send("early/v1/y", "second")];
  expect(mq.isConnected()).toBe(false);

  await mq.connect({ hosts: [broker.host], clientId: clientId(), keysDirectory: testKeysDirectory });
  await Promise.all([...sent, worker.ready, sub.ready, added]);
  await waitFor(() => got.length === 1 && heard.length === 1);
  expect(got[0]!.message).toBe("first");
  expect(heard[0]!.message).toBe("second");
  expect(heard[0]!.info.channel.id).toBe("y");
});

it("e2e: client connect(config, cb), send(channel, data, cb) and disconnect(cb) call back", async () => {
  const broker = cleanup.broker();
  const mq = cleanup.add(client());
  const connectError = await new Promise((resolve) => mq.connect({ hosts: [broker.host], clientId: clientId(), keysDirectory: testKeysDirectory }, resolve));
  expect(connectError).toBeNull();
  expect(mq.isConnected()).toBe(true);

  const got: Received[] = [];
  await mq.consume("cb/v1/1", recorder(got)).ready;
  const sendError = await new Promise((resolve) => mq.send("cb/v1/1", { n: 1 }, resolve));
  expect(sendError).toBeNull();
  await waitFor(() => got.length === 1);
  expect(got[0]!.message).toEqual({ n: 1 });

  const badError = await new Promise<KittenError>((resolve) => mq.send("*/v1/1", 1, resolve as never));
  expect(badError).toBeInstanceOf(KittenError);
  expect(badError.code).toBe("BAD_CHANNEL");

  const disconnectError = await new Promise((resolve) => mq.disconnect(resolve));
  expect(disconnectError).toBeNull();
  expect(mq.isConnected()).toBe(false);
});

it("e2e: client emits 'connect' and 'disconnect' as the broker comes and goes", async () => {
  const port = await freePort();
  const first = cleanup.add(startTestBroker({ socketServer: { port } }));
  const mq = cleanup.add(client());
  const events: string[] = [];
  let connectInfo: { host?: string; welcome?: { serviceId?: string } } = {};
  mq.on("connect", (info) => {
    events.push("connect");
    connectInfo = info;
  });
  mq.on("disconnect", () => events.push("disconnect"));
  let failures = 0;
  mq.on("error", () => failures++); // reconnect failures are reported here while the broker is away
  await mq.connect({ hosts: [first.host], clientId: clientId(), keysDirectory: testKeysDirectory, ...fast });
  expect(events).toEqual(["connect"]);
  expect(connectInfo.host).toBe(first.host);
  expect(connectInfo.welcome?.serviceId).toBe("broker-1");

  await first.stop();
  await waitFor(() => events.length === 2);
  expect(events).toEqual(["connect", "disconnect"]);
  expect(mq.isConnected()).toBe(false);
  // While the broker is away the client retries every 10-50 ms; each failed attempt is an
  // 'error', but the client was disconnected once: one 'disconnect', paired with one 'connect'.
  const before = failures;
  await waitFor(() => failures >= before + 3, 5000, "three failed reconnect attempts");
  expect(events).toEqual(["connect", "disconnect"]);

  cleanup.add(startTestBroker({ socketServer: { port } }));
  await waitFor(() => events.length === 3);
  expect(events).toEqual(["connect", "disconnect", "connect"]);
  expect(mq.isConnected()).toBe(true);
});

it("e2e: client send made while the broker is down is confirmed once it is back", async () => {
  const port = await freePort();
  const first = cleanup.add(startTestBroker({ socketServer: { port } }));
  const mq = await cleanup.client(first, fast);
  let failures = 0;
  mq.on("error", () => failures++);
  await first.stop();
  await waitFor(() => !mq.isConnected());

  let settled = false;
  const sent = mq.send("down/v1/1", { kept: true }).finally(() => (settled = true));
  const before = failures;
  await waitFor(() => failures >= before + 2, 5000, "two failed reconnect attempts after the send");
  expect(settled).toBe(false);

  const second = cleanup.add(startTestBroker({ socketServer: { port } }));
  await sent;
  const worker = await cleanup.client(second);
  const got: Received[] = [];
  await worker.consume("down/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === 1);
  expect(got[0]!.message).toEqual({ kept: true });
  expect(second.broker.queues.get("down/v1")!.counters.received).toBe(1);
});

it("e2e: client handlers are registered again after a reconnect", async () => {
  const port = await freePort();
  const first = cleanup.add(startTestBroker({ socketServer: { port } }));
  const mq = await cleanup.client(first, fast);
  mq.on("error", () => {});
  const got: Received[] = [];
  const heard: Received[] = [];
  await mq.consume("again/v1/1", recorder(got)).ready;
  await mq.listen("again/v1/*", listenRecorder(heard)).ready;
  await first.stop();
  await waitFor(() => !mq.isConnected());

  const second = cleanup.add(startTestBroker({ socketServer: { port } }));
  await waitFor(() => mq.isConnected());
  const sender = await cleanup.client(second);
  // The sender may win the race with the re-registration: the message then waits for it.
  await sender.send("again/v1/1", "after restart");
  await waitFor(() => got.length === 1 && heard.length === 1);
  expect(got[0]!.message).toBe("after restart");
  expect(heard[0]!.message).toBe("after restart");
});

it("e2e: client send rejects at once with QUEUE_FULL when maxPendingMessages are unconfirmed", async () => {
  const port = await freePort(); // nothing listens there
  const mq = cleanup.add(client());
  mq.on("error", () => {});
  const connecting = mq.connect({ hosts: [`127.0.0.1:${port}@broker-1`], clientId: clientId(), keysDirectory: testKeysDirectory, maxPendingMessages: 2, ...fast });
  connecting.catch(() => {});
  const first = mq.send("full/v1/1", 1);
  const second = mq.send("full/v1/1", 2);
  first.catch(() => {});
  second.catch(() => {});
  // At once: settled before the event loop takes its next turn (nothing listens, so a send that
  // waited for a link would wait for ever).
  const third = rejection(mq.send("full/v1/1", 3));
  const nextTurn = new Promise<null>((resolve) => setImmediate(() => resolve(null)));
  const error = (await Promise.race([third, nextTurn]))!;
  expect(error).toBeInstanceOf(KittenError);
  expect(error.code).toBe("QUEUE_FULL");

  // The callback style gets the same error.
  const viaCallback = await new Promise<KittenError>((resolve) => mq.send("full/v1/1", 4, resolve as never));
  expect(viaCallback.code).toBe("QUEUE_FULL");
});

it("e2e: client disconnect() rejects unconfirmed sends and a pending connect with CLOSED", async () => {
  const port = await freePort();
  const broker = cleanup.add(startTestBroker({ socketServer: { port } }));
  const mq = await cleanup.client(broker, fast);
  mq.on("error", () => {});
  await broker.stop();
  await waitFor(() => !mq.isConnected());
  const pending = mq.send("closed/v1/1", "never confirmed");
  const pendingCallback = new Promise<KittenError>((resolve) => mq.send("closed/v1/1", 2, resolve as never));
  await mq.disconnect();
  const error = await rejection(pending);
  expect(error).toBeInstanceOf(KittenError);
  expect(error.code).toBe("CLOSED");
  expect((await pendingCallback).code).toBe("CLOSED");

  const other = cleanup.add(client());
  const connecting = other.connect({ hosts: [`127.0.0.1:${port}@broker-1`], clientId: clientId(), keysDirectory: testKeysDirectory, ...fast });
  await other.disconnect();
  expect((await rejection(connecting)).code).toBe("CLOSED");
});

it("e2e: client connect rejects with AUTH_FAILED on a wrong broker token", async () => {
  const broker = cleanup.broker({ socketServer: { token: "s3cret" } });
  const mq = cleanup.add(client());
  const errors: KittenError[] = [];
  mq.on("error", (error) => errors.push(error));
  const error = await rejection(mq.connect({ hosts: [`${broker.host}#bad`], clientId: clientId(), keysDirectory: testKeysDirectory, ...fast }));
  expect(error).toBeInstanceOf(KittenError);
  expect(error.code).toBe("AUTH_FAILED");
  expect(mq.isConnected()).toBe(false);

  // Without a token: refused the same way, through the callback.
  const noToken = cleanup.add(client());
  const viaCallback = await new Promise<KittenError>((resolve) =>
    noToken.connect({ hosts: [broker.host], clientId: clientId(), keysDirectory: testKeysDirectory, ...fast }, resolve as never).catch(() => {})
  );
  expect(viaCallback.code).toBe("AUTH_FAILED");

  // The right token is accepted.
  const good = await cleanup.client({ host: `${broker.host}#s3cret` });
  await good.send("auth/v1/1", "ok");
  // Refusals are not retried blindly: a handful of attempts at most, not a reconnect loop. The
  // window is the subject: attempts that do not happen have no event to wait for.
  await Bun.sleep(100);
  const refusals = broker.logger.lines.filter((l) => l.includes("code=AUTH_FAILED")).length;
  expect(refusals).toBe(2);
});

it("e2e: client consume handler that throws gets the message again and reports 'error'", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  const errors: Error[] = [];
  mq.on("error", (error) => errors.push(error));
  const got: Received[] = [];
  await mq.consume("throw/v1/1", (err, message, done, info) => {
    if (err) return;
    got.push({ message, info: info!, done, at: performance.now() });
    if (got.length === 1) throw new Error("handler bug");
    done();
  }).ready;
  await mq.send("throw/v1/1", "retry me");
  await waitFor(() => got.length === 2);
  expect(got[1]!.info.nbRequeues).toBe(1);
  expect(errors.map((e) => e.message)).toEqual(["handler bug"]);
});

it("e2e: client listen handler whose promise rejects gets the message again", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  mq.on("error", () => {});
  const got: Received[] = [];
  await mq.listen("throw2/v1/1", async (err, message, info) => {
    if (err) return;
    got.push({ message, info: info!, done: () => {}, at: performance.now() });
    if (got.length === 1) throw new Error("async handler bug");
  }).ready;
  await mq.send("throw2/v1/1", "again");
  await waitFor(() => got.length === 2);
  expect(got[1]!.info.nbRequeues).toBe(1);
  await waitFor(() => broker.broker.queues.get("throw2/v1")!.live === 0);
});

it("e2e: client send resolves only after the broker confirmed (the message is in the queue)", async () => {
  const broker = cleanup.broker();
  const mq = await cleanup.client(broker);
  await mq.send("confirm/v1/1", { big: "x".repeat(100_000) });
  const queue = broker.broker.queues.get("confirm/v1")!;
  expect(queue.counters.received).toBe(1);
  expect(queue.depth().waiting).toBe(1);
  // null and undefined are not messages.
  expect((await rejection(mq.send("confirm/v1/1", null))).code).toBe("BAD_FORMAT");
});

it("e2e: client send larger than the broker's maxFrameSize is refused instead of looping on reconnects", async () => {
  const broker = cleanup.broker({ socketServer: { maxFrameSize: 1024 } });
  const mq = await cleanup.client(broker, fast);
  mq.on("error", () => {});
  const outcome = mq.send("huge/v1/1", "x".repeat(2000)).then(
    () => "confirmed",
    (error: KittenError) => error.code,
  );
  const result = await Promise.race([outcome, Bun.sleep(10_000).then(() => "still pending after 10 s")]);
  expect(result).toBe("FRAME_TOO_LARGE");
  // The link is not torn down and rebuilt over and over, and small sends still work.
  expect(broker.logger.lines.filter((l) => l.includes("code=FRAME_TOO_LARGE")).length).toBeLessThanOrEqual(1);
  await mq.send("huge/v1/1", "small");
});

it("e2e: client send is refused with QUEUE_FULL when the broker queue holds maxMessagesPerQueue", async () => {
  const broker = cleanup.broker({ maxMessagesPerQueue: 2 });
  const mq = await cleanup.client(broker);
  await mq.send("bq/v1/1", 1);
  await mq.send("bq/v1/1", 2);
  const error = await rejection(mq.send("bq/v1/1", 3));
  expect(error.code).toBe("QUEUE_FULL");
  // Another queue is not affected.
  await mq.send("bq2/v1/1", 1);
});

it("e2e: client subscription close() while the broker is away settles once it is back", async () => {
  const port = await freePort();
  const first = cleanup.add(startTestBroker({ socketServer: { port } }));
  const mq = await cleanup.client(first, fast);
  mq.on("error", () => {});
  const heard: Received[] = [];
  const sub = mq.listen("gone/v1/1", listenRecorder(heard));
  await sub.ready;
  await first.stop();
  await waitFor(() => !mq.isConnected());
  const closing = sub.close().then(() => "closed", (error: KittenError) => `rejected with ${error.code}`);

  const second = cleanup.add(startTestBroker({ socketServer: { port } }));
  const result = await Promise.race([closing, Bun.sleep(10_000).then(() => "still pending after 10 s")]);
  expect(result).toBe("closed");
  // And the closed handler was not registered again.
  const sender = await cleanup.client(second);
  await sender.send("gone/v1/1", "nobody");
  expect(second.broker.queues.get("gone/v1")!.depth().waiting).toBe(1);
  expect(heard).toHaveLength(0);
});

it("e2e: client connect() can be called again after a refusal (AUTH_FAILED)", async () => {
  const broker = cleanup.broker({ socketServer: { token: "s3cret" } });
  const mq = cleanup.add(client());
  mq.on("error", () => {});
  const id = clientId();
  const refused = await rejection(mq.connect({ hosts: [`${broker.host}#wrong`], clientId: id, keysDirectory: testKeysDirectory }));
  expect(refused.code).toBe("AUTH_FAILED");
  await mq.connect({ hosts: [`${broker.host}#s3cret`], clientId: id, keysDirectory: testKeysDirectory });
  expect(mq.isConnected()).toBe(true);
});

it("e2e: client sends made before a refused connect() are rejected with the refusal, not left waiting", async () => {
  const broker = cleanup.broker({ socketServer: { token: "s3cret" } });
  const mq = cleanup.add(client());
  mq.on("error", () => {});
  const early = mq.send("refused/v1/1", "queued before connect");
  const refused = await rejection(
    mq.connect({ hosts: [`${broker.host}#wrong`], clientId: clientId(), keysDirectory: testKeysDirectory }),
  );
  expect(refused.code).toBe("AUTH_FAILED");
  expect((await rejection(early)).code).toBe("AUTH_FAILED");
});

it("e2e: a handler that throws on its registration error is reported, and the client keeps working", async () => {
  const broker = cleanup.broker();
  const mq = cleanup.add(client());
  const errors: string[] = [];
  mq.on("error", (error: Error) => errors.push(error.message));
  await mq.connect({ hosts: [broker.host], clientId: clientId(), keysDirectory: testKeysDirectory });
  mq.listen("*/v1/1", () => {
    throw new Error("handler threw on its error");
  });
  const got: Received[] = [];
  const worker = mq.consume("after-throw/v1/1", recorder(got));
  await worker.ready;
  await mq.send("after-throw/v1/1", "still delivered");
  await waitFor(() => got.length === 1 && errors.length > 0);
  expect(errors).toContain("handler threw on its error");
  expect(got[0]!.message).toBe("still delivered");
});

it("e2e: client drops and retries a host that accepts the connection but never answers (handshakeTimeoutMs)", async () => {
  const broker = cleanup.broker();
  const sockets: import("node:net").Socket[] = [];
  let accepted = 0;
  const silent = createServer((socket) => {
    accepted++;
    sockets.push(socket); // holds the connection open and never writes
  });
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  cleanup.defer(() => {
    for (const socket of sockets) socket.destroy();
    silent.close();
  });
  const port = (silent.address() as import("node:net").AddressInfo).port;
  const mq = cleanup.add(client());
  await mq.connect({
    hosts: [`127.0.0.1:${port}@broker-1`, broker.host],
    clientId: clientId(),
    keysDirectory: testKeysDirectory,
    handshakeTimeoutMs: 150,
    reconnectDelayMs: 20,
    maxReconnectDelayMs: 50,
  });
  await mq.send("silent/v1/1", { ok: true }); // the good host serves meanwhile
  await waitFor(() => accepted >= 3, 3000); // dropped after 150 ms and dialled again, repeatedly
  expect(mq.status().find((s) => s.host.includes(`:${port}@`))?.connected).toBe(false);
});

for (const event of ["connect", "master"] as const) {
  it(`e2e: client '${event}' listener that throws is reported, and the link still opens: connect() resolves, sends are confirmed`, async () => {
    const broker = cleanup.broker();
    const mq = cleanup.add(client());
    const errors: string[] = [];
    mq.on("error", (error: Error) => errors.push(error.message));
    mq.on(event, () => {
      throw new Error(`${event} listener bug`);
    });
    const connecting = mq.connect({ hosts: [broker.host], clientId: clientId(), keysDirectory: testKeysDirectory });
    const outcome = await Promise.race([
      connecting.then(() => "connected", (error: Error) => `rejected: ${error.message}`),
      sleep(10_000).then(() => "still pending after 10 s"),
    ]);
    expect(outcome).toBe("connected");
    const got: Received[] = [];
    await mq.consume("open-throw/v1/1", recorder(got)).ready;
    await mq.send("open-throw/v1/1", "after the throw");
    await waitFor(() => got.length === 1);
    expect(errors).toEqual([`${event} listener bug`]);
    expect(mq.isConnected()).toBe(true);
  });
}

it("e2e: client 'disconnect' listener that throws is reported, and the client still reconnects", async () => {
  const port = await freePort();
  const first = cleanup.add(startTestBroker({ socketServer: { port } }));
  const mq = await cleanup.client(first, fast);
  const errors: string[] = [];
  mq.on("error", (error: Error) => errors.push(error.message));
  mq.on("disconnect", () => {
    throw new Error("disconnect listener bug");
  });
  await first.stop();
  await waitFor(() => errors.includes("disconnect listener bug"));
  cleanup.add(startTestBroker({ socketServer: { port } }));
  await waitFor(() => mq.isConnected());
  await mq.send("close-throw/v1/1", "after the throw");
});

it("e2e: client connect() with a tls.ca that cannot be used rejects with CONFIG_INVALID instead of waiting forever", async () => {
  // Bun fails a test on anything thrown uncaught or rejected unhandled while it runs.
  const broker = cleanup.broker();
  const mq = cleanup.add(client());
  const errors: Error[] = [];
  mq.on("error", (error: Error) => errors.push(error));
  const early = mq.send("bad-ca/v1/1", "queued before connect");
  const connecting = mq.connect({
    hosts: [broker.host],
    clientId: clientId(),
    keysDirectory: testKeysDirectory,
    handshakeTimeoutMs: 50,
    tls: { ca: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----" },
  });
  const outcome = await Promise.race([rejection(connecting), sleep(10_000).then(() => null)]);
  expect(outcome).toBeInstanceOf(KittenError);
  const error = outcome!;
  expect(error.code).toBe("CONFIG_INVALID");
  expect(error.message).toContain(`"${broker.host}"`);
  expect(error.cause).toBeInstanceOf(Error);
  expect(error.message).toContain((error.cause as Error).message);
  expect((await rejection(early)).code).toBe("CONFIG_INVALID");
  expect(errors).toEqual([error]);
  // The window is the subject: past handshakeTimeoutMs, no deadline fires for a link that never was.
  await sleep(150);
  expect(mq.isConnected()).toBe(false);
});

it("e2e: client 'error' listener that throws does not hold back the NACK of a failed handler (requeued at once)", async () => {
  const console_ = spyOn(console, "error").mockImplementation(() => {});
  cleanup.defer(() => console_.mockRestore());
  const broker = cleanup.broker(); // requeueInterval 100 s: only a NACK brings the message back in time
  const mq = await cleanup.client(broker);
  mq.on("error", () => {
    throw new Error("error listener bug");
  });
  const got: Received[] = [];
  await mq.consume("nack-first/v1/1", (err, message, done, info) => {
    if (err) return;
    got.push({ message, info: info!, done, at: performance.now() });
    if (got.length === 1) throw new Error("handler bug");
    done();
  }).ready;
  await mq.send("nack-first/v1/1", "retry me");
  await waitFor(() => got.length === 2);
  expect(got[1]!.info.nbRequeues).toBe(1);
  expect(console_).toHaveBeenCalled();
});

it("e2e: client 'error' listener that throws does not hold back the NACK of an undecodable message", async () => {
  const console_ = spyOn(console, "error").mockImplementation(() => {});
  cleanup.defer(() => console_.mockRestore());
  const broker = cleanup.broker({ requeueLimit: 3 });
  const mq = await cleanup.client(broker);
  let reports = 0;
  mq.on("error", (error: KittenError) => {
    if (error.code === "BAD_FORMAT") reports++;
    throw new Error("error listener bug");
  });
  await mq.consume("undecodable/v1/1", () => {}).ready;
  const wire = await dial(broker.port);
  cleanup.defer(() => wire.close());
  await hello(wire, clientId());
  wire.send([OP.SEND, 1, "undecodable/v1/1", "raw-1", new Uint8Array([0xff])]); // 0xff: a CBOR "break" alone
  await wire.expect(OP.OK);
  await waitFor(() => reports >= 2); // delivered, NACKed, delivered again: no 100 s ack timeout between
});

it("e2e: client done() called after disconnect() does not hide the message from a later multi-broker connect()", async () => {
  const master = cleanup.broker();
  const slave = cleanup.broker({ isMaster: false });
  const mq = cleanup.add(client());
  mq.on("error", () => {});
  const id = clientId();
  await mq.connect({ hosts: [master.host], clientId: id, keysDirectory: testKeysDirectory, ...fast });
  const got: Received[] = [];
  await mq.consume("late-done/v1/1", recorder(got, { ack: false })).ready;
  await mq.send("late-done/v1/1", "once");
  await waitFor(() => got.length === 1);
  await mq.disconnect(); // the broker requeues the unacked message
  got[0]!.done(); // too late: the link it came from is gone
  await mq.connect({ hosts: [master.host, slave.host], clientId: id, keysDirectory: testKeysDirectory, ...fast });
  await waitFor(() => got.length === 2);
  expect(got[1]!.info.messageId).toBe(got[0]!.info.messageId);
  expect(got[1]!.info.nbRequeues).toBe(1);
});

it("e2e: client connect() is not reset by the key read of an earlier connect() that was disconnected", async () => {
  const broker = cleanup.broker();
  const mq = cleanup.add(client());
  mq.on("error", () => {});
  const id = clientId();
  // keysName "bad/name" makes that connect()'s key read fail, after the two calls below.
  const stale = mq.connect({ hosts: [broker.host], clientId: id, keysDirectory: testKeysDirectory, keysName: "bad/name" });
  mq.disconnect();
  const fresh = mq.connect({ hosts: [broker.host], clientId: id, keysDirectory: testKeysDirectory });
  expect((await rejection(stale)).code).toBe("CLOSED");
  await fresh;
  expect(mq.isConnected()).toBe(true);
  await mq.send("stale-keys/v1/1", "ok");
});
