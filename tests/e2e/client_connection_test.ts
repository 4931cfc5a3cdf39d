/**
 * The client's links end to end: 'connect' and 'disconnect' as a broker comes and goes,
 * registrations again after a reconnect, refused and unusable connects, and hosts that never answer.
 */
import { afterEach, expect, it } from "bun:test";
import { createServer } from "node:net";
import { client, KittenError } from "../../mod.ts";
import { testKeysDirectory } from "../helpers/keys.ts";
import {
  Cleanup,
  fastReconnect,
  freePort,
  listenRecorder,
  type Received,
  recorder,
  rejection,
  sleep,
  startTestBroker,
  uniqueClientId,
  waitFor,
} from "../helpers/broker.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

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
  await mq.connect({ hosts: [first.host], clientId: uniqueClientId(), keysDirectory: testKeysDirectory, ...fastReconnect });
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

it("e2e: client handlers are registered again after a reconnect", async () => {
  const port = await freePort();
  const first = cleanup.add(startTestBroker({ socketServer: { port } }));
  const mq = await cleanup.client(first, fastReconnect);
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

it("e2e: client connect rejects with AUTH_FAILED on a wrong broker token", async () => {
  const broker = cleanup.broker({ socketServer: { token: "s3cret" } });
  const mq = cleanup.add(client());
  const errors: KittenError[] = [];
  mq.on("error", (error) => errors.push(error));
  const error = await rejection(mq.connect({ hosts: [`${broker.host}#bad`], clientId: uniqueClientId(), keysDirectory: testKeysDirectory, ...fastReconnect }));
  expect(error).toBeInstanceOf(KittenError);
  expect(error.code).toBe("AUTH_FAILED");
  expect(mq.isConnected()).toBe(false);

  // Without a token: refused the same way, through the callback.
  const noToken = cleanup.add(client());
  const viaCallback = await new Promise<KittenError>((resolve) =>
    noToken.connect({ hosts: [broker.host], clientId: uniqueClientId(), keysDirectory: testKeysDirectory, ...fastReconnect }, resolve as never).catch(() => {})
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

it("e2e: client subscription close() while the broker is away settles once it is back", async () => {
  const port = await freePort();
  const first = cleanup.add(startTestBroker({ socketServer: { port } }));
  const mq = await cleanup.client(first, fastReconnect);
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
  const id = uniqueClientId();
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
    mq.connect({ hosts: [`${broker.host}#wrong`], clientId: uniqueClientId(), keysDirectory: testKeysDirectory }),
  );
  expect(refused.code).toBe("AUTH_FAILED");
  expect((await rejection(early)).code).toBe("AUTH_FAILED");
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
    clientId: uniqueClientId(),
    keysDirectory: testKeysDirectory,
    handshakeTimeoutMs: 150,
    reconnectDelayMs: 20,
    maxReconnectDelayMs: 50,
  });
  await mq.send("silent/v1/1", { ok: true }); // the good host serves meanwhile
  await waitFor(() => accepted >= 3, 3000); // dropped after 150 ms and dialled again, repeatedly
  expect(mq.status().find((s) => s.host.includes(`:${port}@`))?.connected).toBe(false);
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
    clientId: uniqueClientId(),
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

it("e2e: client done() called after disconnect() does not hide the message from a later multi-broker connect()", async () => {
  const master = cleanup.broker();
  const slave = cleanup.broker({ isMaster: false });
  const mq = cleanup.add(client());
  mq.on("error", () => {});
  const id = uniqueClientId();
  await mq.connect({ hosts: [master.host], clientId: id, keysDirectory: testKeysDirectory, ...fastReconnect });
  const got: Received[] = [];
  await mq.consume("late-done/v1/1", recorder(got, { ack: false })).ready;
  await mq.send("late-done/v1/1", "once");
  await waitFor(() => got.length === 1);
  await mq.disconnect(); // the broker requeues the unacked message
  got[0]!.done(); // too late: the link it came from is gone
  await mq.connect({ hosts: [master.host, slave.host], clientId: id, keysDirectory: testKeysDirectory, ...fastReconnect });
  await waitFor(() => got.length === 2);
  expect(got[1]!.info.messageId).toBe(got[0]!.info.messageId);
  expect(got[1]!.info.nbRequeues).toBe(1);
});

it("e2e: client connect() is not reset by the key read of an earlier connect() that was disconnected", async () => {
  const broker = cleanup.broker();
  const mq = cleanup.add(client());
  mq.on("error", () => {});
  const id = uniqueClientId();
  // keysName "bad/name" makes that connect()'s key read fail, after the two calls below.
  const stale = mq.connect({ hosts: [broker.host], clientId: id, keysDirectory: testKeysDirectory, keysName: "bad/name" });
  mq.disconnect();
  const fresh = mq.connect({ hosts: [broker.host], clientId: id, keysDirectory: testKeysDirectory });
  expect((await rejection(stale)).code).toBe("CLOSED");
  await fresh;
  expect(mq.isConnected()).toBe(true);
  await mq.send("stale-keys/v1/1", "ok");
});
