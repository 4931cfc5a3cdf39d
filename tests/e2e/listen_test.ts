import { afterEach, expect, it } from "bun:test";
import type { KittenError } from "../../mod.ts";
import { Cleanup, listenRecorder, type Received, recorder, waitFor } from "../helpers/broker.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

it("e2e: listen gives one copy to every distinct clientId", async () => {
  const broker = cleanup.broker();
  const a = await cleanup.client(broker, { clientId: "service-a" });
  const b = await cleanup.client(broker, { clientId: "service-b" });
  const sender = await cleanup.client(broker);
  const gotA: Received[] = [];
  const gotB: Received[] = [];
  await a.listen("news/v1/1", listenRecorder(gotA)).ready;
  await b.listen("news/v1/1", listenRecorder(gotB)).ready;
  for (let i = 0; i < 5; i++) await sender.send("news/v1/1", i);
  await waitFor(() => gotA.length === 5 && gotB.length === 5);
  expect(gotA.map((r) => r.message)).toEqual([0, 1, 2, 3, 4]);
  expect(gotB.map((r) => r.message)).toEqual([0, 1, 2, 3, 4]);
  expect(gotA[0]!.info.messageId).toBe(gotB[0]!.info.messageId);
  // Listener deliveries are acked automatically.
  await waitFor(() => broker.broker.queues.get("news/v1")!.live === 0);
});

it("e2e: listeners sharing a clientId share one copy round-robin", async () => {
  const broker = cleanup.broker();
  const a = await cleanup.client(broker, { clientId: "shared-service" });
  const b = await cleanup.client(broker, { clientId: "shared-service" });
  const sender = await cleanup.client(broker);
  const gotA: Received[] = [];
  const gotB: Received[] = [];
  await a.listen("news/v1/1", listenRecorder(gotA)).ready;
  await b.listen("news/v1/1", listenRecorder(gotB)).ready;
  for (let i = 0; i < 6; i++) await sender.send("news/v1/1", i);
  await waitFor(() => gotA.length + gotB.length === 6);
  expect(gotA.map((r) => r.message)).toEqual([0, 2, 4]);
  expect(gotB.map((r) => r.message)).toEqual([1, 3, 5]);
});

it("e2e: listen and consume on one channel: the listeners' copy and the consumers' copy are separate", async () => {
  const broker = cleanup.broker();
  const listener = await cleanup.client(broker);
  const workerA = await cleanup.client(broker);
  const workerB = await cleanup.client(broker);
  const heard: Received[] = [];
  const worked: Received[] = [];
  await listener.listen("both/v1/1", listenRecorder(heard)).ready;
  await workerA.consume("both/v1/1", recorder(worked)).ready;
  await workerB.consume("both/v1/1", recorder(worked)).ready;
  for (let i = 0; i < 4; i++) await listener.send("both/v1/1", i);
  await waitFor(() => heard.length === 4 && worked.length === 4);
  expect(heard.map((r) => r.message)).toEqual([0, 1, 2, 3]);
  expect(worked.map((r) => r.message as number).sort()).toEqual([0, 1, 2, 3]);
});

it("e2e: listen on e/v/* receives every id, with the id in info.channel", async () => {
  const broker = cleanup.broker();
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.listen("wild/v1/*", listenRecorder(got)).ready;
  await mq.send("wild/v1/a", "to a");
  await mq.send("wild/v1/b", "to b");
  await mq.send("other/v1/a", "another queue");
  await waitFor(() => got.length === 2);
  expect(got.map((r) => [r.info.channel.id, r.message])).toEqual([["a", "to a"], ["b", "to b"]]);
  expect(got[0]!.info.channel.endpoint).toBe("wild");
  expect(got[0]!.info.channel.version).toBe("v1");
});

it("e2e: a client listening on an id and on * receives one copy, not two", async () => {
  const broker = cleanup.broker();
  const mq = await cleanup.client(broker);
  const sender = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.listen("dup/v1/1", listenRecorder(got)).ready;
  await mq.listen("dup/v1/*", listenRecorder(got)).ready;
  await sender.send("dup/v1/1", "one");
  await sender.send("dup/v1/2", "two");
  await waitFor(() => got.length >= 2);
  await waitFor(() => broker.broker.queues.get("dup/v1")!.live === 0);
  expect(got.map((r) => r.message)).toEqual(["one", "two"]);
});

it("e2e: send to e/v/* is delivered to every id that has a registration", async () => {
  const broker = cleanup.broker();
  const one = await cleanup.client(broker);
  const two = await cleanup.client(broker);
  const worker = await cleanup.client(broker);
  const sender = await cleanup.client(broker);
  const got1: Received[] = [];
  const got2: Received[] = [];
  const got3: Received[] = [];
  await one.listen("cast/v1/1", listenRecorder(got1)).ready;
  await two.listen("cast/v1/2", listenRecorder(got2)).ready;
  await worker.consume("cast/v1/3", recorder(got3)).ready;
  await sender.send("cast/v1/*", "hello all");
  await waitFor(() => got1.length === 1 && got2.length === 1 && got3.length === 1);
  expect(got1[0]!.info.channel.id).toBe("1");
  expect(got2[0]!.info.channel.id).toBe("2");
  expect(got3[0]!.info.channel.id).toBe("3");
  expect(got3[0]!.message).toBe("hello all");
  await waitFor(() => broker.broker.queues.get("cast/v1")!.live === 0);
  // Settled: each recipient got its one copy and no second one followed.
  expect([got1.length, got2.length, got3.length]).toEqual([1, 1, 1]);
  expect(got1[0]!.message).toBe("hello all");
  expect(got2[0]!.message).toBe("hello all");
});

it("e2e: listen on an object channel {endpoint, version, ids} with addId/removeId at runtime", async () => {
  const broker = cleanup.broker();
  const mq = await cleanup.client(broker);
  const sender = await cleanup.client(broker);
  const got: Received[] = [];
  const sub = mq.listen({ endpoint: "obj", version: "v1", ids: [1, "two"] }, listenRecorder(got));
  await sub.ready;
  await sender.send("obj/v1/1", "a");
  await sender.send("obj/v1/two", "b");
  await sender.send("obj/v1/3", "not yet");
  await sender.send("obj/v1/1", "c");
  await waitFor(() => got.length === 3);
  expect(got.map((r) => r.message)).toEqual(["a", "b", "c"]);

  // addId with a callback: the message that waited for id 3 arrives, then new ones.
  const added = await new Promise<KittenError | null>((resolve) => sub.addId(3, resolve));
  expect(added).toBeNull();
  await waitFor(() => got.length === 4);
  expect(got[3]!.message).toBe("not yet");
  expect(got[3]!.info.channel.id).toBe("3");
  await sender.send("obj/v1/3", "d");
  await waitFor(() => got.length === 5);

  // removeId (promise): messages to id 1 are no longer delivered here.
  await sub.removeId(1);
  expect(sub.ids).toEqual(["two", "3"]);
  await sender.send("obj/v1/1", "gone");
  await sender.send("obj/v1/two", "e"); // sent after "gone" on the same link: arrives after it would have
  await waitFor(() => got.length === 6);
  expect(got.map((r) => r.message)).toEqual(["a", "b", "c", "not yet", "d", "e"]);
  expect(broker.broker.queues.get("obj/v1")!.waitingById().get("1")).toBe(1);
});

it("e2e: consume on an object channel with addId/removeId callbacks", async () => {
  const broker = cleanup.broker();
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  const sub = mq.consume({ endpoint: "objc", version: "v1", ids: "a" }, recorder(got));
  await sub.ready;
  const results: (KittenError | null)[] = [];
  sub.addId(["b", "c"], (err) => results.push(err));
  await waitFor(() => results.length === 1);
  expect(results[0]).toBeNull();
  await mq.send("objc/v1/c", 1);
  await waitFor(() => got.length === 1);
  sub.removeId("c", (err) => results.push(err));
  await waitFor(() => results.length === 2);
  expect(results[1]).toBeNull();
  await mq.send("objc/v1/c", 2);
  await mq.send("objc/v1/b", 3);
  await waitFor(() => got.length === 2);
  expect(got.map((r) => r.message)).toEqual([1, 3]);

  // An invalid id is refused with BAD_CHANNEL, through the callback and the promise.
  const refused = await new Promise<KittenError | null>((resolve) => sub.addId("x/y", resolve).catch(() => {}));
  expect(refused?.code).toBe("BAD_CHANNEL");
});

it("e2e: listen to '*' as endpoint or version is refused with BAD_CHANNEL", async () => {
  const broker = cleanup.broker();
  const mq = await cleanup.client(broker);
  for (const channel of ["*/v1/1", "ep/*/1", { endpoint: "*", version: "v1", ids: ["1"] }]) {
    const errors: KittenError[] = [];
    const sub = mq.listen(channel, (err) => {
      if (err) errors.push(err);
    });
    const error = await sub.ready.then(() => null, (e: KittenError) => e);
    expect(error?.code).toBe("BAD_CHANNEL");
    await waitFor(() => errors.length === 1);
    expect(errors[0]!.code).toBe("BAD_CHANNEL");
  }
  const consumeErrors: KittenError[] = [];
  const sub = mq.consume("ep/*/1", (err, _m, _done) => {
    if (err) consumeErrors.push(err);
  });
  await expect(sub.ready).rejects.toMatchObject({ code: "BAD_CHANNEL" });
  await waitFor(() => consumeErrors.length === 1);
});

it("e2e: send to '*' as endpoint or version is refused with BAD_CHANNEL", async () => {
  const broker = cleanup.broker();
  const mq = await cleanup.client(broker);
  for (const channel of ["*/v1/1", "ep/*/1", "*/*/*", "ep/v1", "ep/v 1/1"]) {
    await expect(mq.send(channel, "x")).rejects.toMatchObject({ code: "BAD_CHANNEL" });
  }
  // The client still works afterwards.
  await mq.send("ep/v1/1", "fine");
});

it("e2e: listenerPrefetch bounds a listener's unsettled deliveries, and caps the prefetch listen() asks for", async () => {
  const broker = cleanup.broker({ channels: { "lp/v1": { listenerPrefetch: 2 } } });
  const listener = await cleanup.client(broker);
  const sender = await cleanup.client(broker);
  const finish: (() => void)[] = [];
  const seen: unknown[] = [];
  // The handler's promise settles the delivery: held, each delivery stays in flight.
  const handler = (_error: KittenError | null, message: unknown) => {
    seen.push(message);
    return new Promise<void>((resolve) => finish.push(resolve));
  };
  await listener.listen("lp/v1/1", handler, { prefetch: 50 }).ready;
  await Promise.all([1, 2, 3, 4, 5].map((n) => sender.send("lp/v1/1", n)));
  const queue = broker.broker.queues.get("lp/v1")!;
  await waitFor(() => queue.depth().inflight === 2 && queue.depth().ready === 3);
  expect(seen).toEqual([1, 2]);
  for (const resolve of finish.splice(0)) resolve();
  await waitFor(() => seen.length === 4);
  expect(queue.depth()).toMatchObject({ inflight: 2, ready: 1 });
  for (const resolve of finish.splice(0)) resolve();
  await waitFor(() => seen.length === 5);
  for (const resolve of finish.splice(0)) resolve();
  await waitFor(() => queue.live === 0);
  expect(seen).toEqual([1, 2, 3, 4, 5]);
});
