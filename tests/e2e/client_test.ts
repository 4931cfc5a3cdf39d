/**
 * The client's API end to end: calls made before connect(), callbacks, and sends with their
 * confirmations and refusals.
 */
import { afterEach, expect, it } from "bun:test";
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
  startTestBroker,
  uniqueClientId,
  waitFor,
} from "../helpers/broker.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);


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

  await mq.connect({ hosts: [broker.host], clientId: uniqueClientId(), keysDirectory: testKeysDirectory });
  await Promise.all([...sent, worker.ready, sub.ready, added]);
  await waitFor(() => got.length === 1 && heard.length === 1);
  expect(got[0]!.message).toBe("first");
  expect(heard[0]!.message).toBe("second");
  expect(heard[0]!.info.channel.id).toBe("y");
});

it("e2e: client connect(config, cb), send(channel, data, cb) and disconnect(cb) call back", async () => {
  const broker = cleanup.broker();
  const mq = cleanup.add(client());
  const connectError = await new Promise((resolve) => mq.connect({ hosts: [broker.host], clientId: uniqueClientId(), keysDirectory: testKeysDirectory }, resolve));
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

it("e2e: client send made while the broker is down is confirmed once it is back", async () => {
  const port = await freePort();
  const first = cleanup.add(startTestBroker({ socketServer: { port } }));
  const mq = await cleanup.client(first, fastReconnect);
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

it("e2e: client send rejects at once with QUEUE_FULL when maxPendingMessages are unconfirmed", async () => {
  const port = await freePort(); // nothing listens there
  const mq = cleanup.add(client());
  mq.on("error", () => {});
  const connecting = mq.connect({ hosts: [`127.0.0.1:${port}@broker-1`], clientId: uniqueClientId(), keysDirectory: testKeysDirectory, maxPendingMessages: 2, ...fastReconnect });
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
  const mq = await cleanup.client(broker, fastReconnect);
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
  const connecting = other.connect({ hosts: [`127.0.0.1:${port}@broker-1`], clientId: uniqueClientId(), keysDirectory: testKeysDirectory, ...fastReconnect });
  await other.disconnect();
  expect((await rejection(connecting)).code).toBe("CLOSED");
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
  const mq = await cleanup.client(broker, fastReconnect);
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

it("e2e: what a client sends arrives equal, JSON-like bodies (encoded by the client itself) and others alike", async () => {
  const broker = cleanup.broker();
  const mq = await cleanup.client(broker);
  const bodies: unknown[] = [
    { seq: 1, t: 1_733_000_000_123.5, type: "order.created", amount: -12.25, items: [1, 2, 3], ok: true, none: null },
    { text: "zoë ☕ 猫", big: 2 ** 52, nested: { deeper: [{ a: "b" }] } },
    Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`key${i}`, i])), // a map head written after its entries
    "a bare string",
    [0, -1, 255, 65_536],
    { when: new Date(1_733_000_000_000) }, // not JSON-like: the generic encoder's
    { bytes: new Uint8Array([1, 2, 3]) },
  ];
  const got: Received[] = [];
  await mq.consume("bodies/v1/1", recorder(got)).ready;
  for (const body of bodies) await mq.send("bodies/v1/1", body);
  await waitFor(() => got.length === bodies.length);
  expect(got.map((r) => r.message)).toEqual(bodies);
});
