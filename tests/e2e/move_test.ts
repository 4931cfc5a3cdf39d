/**
 * Moving a queue online between groups (real etcd, one in-process broker per group): the queue
 * keeps serving a publisher and a consumer while the target copies it, the switch happens at a
 * fence, and nothing confirmed is lost.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "bun:test";
import { Client, type KittenError } from "../../mod.ts";
import { clientOptions, type TestBroker, waitFor } from "../helpers/broker.ts";
import { startGroups } from "../helpers/groups.ts";
import { OP } from "../../src/protocol/mod.ts";
import { canPage } from "../../src/server/store/store.ts";
import { type EtcdCluster, startEtcd } from "../helpers/etcd.ts";

let etcd: EtcdCluster;
const brokers: TestBroker[] = [];
const clients: Client[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
});

afterEach(async () => {
  for (const mq of clients.splice(0)) await mq.disconnect();
  await Promise.all(brokers.splice(0).map((broker) => broker.stop()));
});

afterAll(async () => {
  await etcd?.cleanup();
});

async function groups(names: string[], extra: Record<string, unknown> = {}): Promise<TestBroker[]> {
  const started = await startGroups(etcd, names, extra);
  brokers.push(...started);
  return started;
}

async function client(seed: TestBroker): Promise<Client> {
  const mq = new Client();
  mq.on("error", (_error: KittenError) => {});
  clients.push(mq);
  await mq.connect(clientOptions(seed, { hosts: [`127.0.0.1:${seed.port}@${seed.broker.config.serviceId}`], sendTimeoutMs: 30_000 }));
  return mq;
}

describe("moving a queue between groups (real etcd)", () => {
  it("a queue with a backlog moves to another group while a publisher and a consumer run: every confirmed message is delivered", async () => {
    const [g1, g2] = await groups(["g1", "g2"], { channels: { "moving/v1": { group: "g1" } } });
    const publisher = await client(g1!);
    for (let n = 0; n < 2000; n++) void publisher.send("moving/v1/a", { n });
    await waitFor(() => (g1!.broker.queues.get("moving/v1")?.held ?? 0) >= 2000, 10_000, "backlog on g1");

    const received = new Set<number>();
    let duplicates = 0;
    const consumer = await client(g2!);
    consumer.consume("moving/v1/*", (error, message, done) => {
      if (error) return;
      const n = (message as { n: number }).n;
      if (received.has(n)) duplicates++;
      received.add(n);
      done();
    }, { prefetch: 10 });

    let confirmed = 2000;
    let sending = true;
    const running = (async () => {
      let n = 2000;
      while (sending) {
        await publisher.send("moving/v1/a", { n: n++ });
        confirmed = n;
      }
    })();

    const record = await g2!.broker.moves.request("moving/v1", "g2");
    expect(record).toMatchObject({ queue: "moving/v1", from: "g1", to: "g2", state: "copying" });
    await waitFor(() => g1!.broker.moves.status()[0]?.state === "done", 20_000, "the move is done");
    await waitFor(() => g1!.broker.placement.status()!.groups.g2?.queues.includes("moving/v1"), 5000, "g1 sees g2 own the queue");
    await waitFor(() => confirmed > 2200, 10_000, "sends go on after the switch");
    sending = false;
    await running;
    await waitFor(() => received.size >= confirmed, 20_000, "every confirmed message delivered");
    for (let n = 0; n < confirmed; n++) expect(received.has(n)).toBe(true);
    // The source dropped the queue; the target serves it.
    await waitFor(() => !g1!.broker.queues.has("moving/v1"), 5000, "g1 dropped the queue");
    const done = g2!.broker.moves.status()[0]!;
    expect(done.state).toBe("done");
    expect(done.fenceMs).toBeLessThan(2000);
    // Everything the queue held was streamed; deliveries of a message twice are the ones in flight
    // or acked on the source in the moment of the switch, a bounded few, never the queue again.
    expect(done.copied).toBeGreaterThanOrEqual(2000);
    expect(duplicates).toBeLessThan(confirmed / 2);
  });
});

describe("moving a durable queue that pages to its store (real etcd)", () => {
  it("a backlog beyond the memory budget moves whole: every message held on the source is delivered by the target", async () => {
    const [g1, g2] = await groups(["g1", "g2"], {
      durability: "fsync",
      channels: { "paged/v1": { group: "g1", memoryBudgetBytes: 64 * 1024 } },
    });
    const publisher = await client(g1!);
    const total = 5000;
    await Promise.all(Array.from({ length: total }, (_, n) => publisher.send("paged/v1/a", { n, pad: "x".repeat(100) })));
    const source = g1!.broker.queues.get("paged/v1")!;
    expect(source.backlog.count).toBeGreaterThan(0); // paged: the budget holds a few hundred
    await g2!.broker.moves.request("paged/v1", "g2");
    await waitFor(() => g1!.broker.moves.status()[0]?.state === "done", 20_000, "the move is done");
    const target = g2!.broker.queues.get("paged/v1")!;
    expect(target.held).toBe(total);

    const received = new Set<number>();
    const consumer = await client(g2!);
    consumer.consume("paged/v1/*", (error, message, done) => {
      if (error) return;
      received.add((message as { n: number }).n);
      done();
    }, { prefetch: 100 });
    await waitFor(() => received.size === total, 20_000, "every message delivered by the target");
  });
});

describe("moving a queue of large messages (real etcd)", () => {
  it("messages as large as maxFrameSize allows move whole (a MOVE_APPEND is larger than their SEND; the stream is bounded in bytes in flight)", async () => {
    const [g1, g2] = await groups(["g1", "g2"], { channels: { "big/v1": { group: "g1" } } });
    const publisher = await client(g1!);
    const body = "x".repeat(1024 * 1024 - 64);
    const total = 60;
    for (let n = 0; n < total; n++) await publisher.send("big/v1/a", { n, body });
    await g2!.broker.moves.request("big/v1", "g2");
    await waitFor(() => ["done", "rolled-back"].includes(g2!.broker.moves.status()[0]?.state ?? ""), 30_000, "the move ends");
    expect(g2!.broker.moves.status()[0]).toMatchObject({ state: "done" }); // its reason shows when not
    const record = g2!.broker.moves.status()[0]!;
    expect(record.copied).toBe(total);
    expect(record.bytes).toBeGreaterThan(total * 1024 * 1024 - total * 64);
    expect(g2!.broker.queues.get("big/v1")!.held).toBe(total);

    const received = new Set<number>();
    const consumer = await client(g2!);
    consumer.consume("big/v1/*", (error, message, done) => {
      if (error) return;
      const value = message as { n: number; body: string };
      if (value.body.length === body.length) received.add(value.n);
      done();
    }, { prefetch: 10 });
    await waitFor(() => received.size === total, 20_000, "every large message delivered whole by the target");
  });
});

describe("a move into a group whose disk is below its floor (real etcd)", () => {
  it("is rolled back with DISK_FULL named, and the queue keeps serving on its group with every message", async () => {
    const [g1, g2] = await groups(["g1", "g2"], { durability: "fsync", channels: { "full/v1": { group: "g1" } } });
    const publisher = await client(g1!);
    for (let n = 0; n < 200; n++) await publisher.send("full/v1/a", { n });
    // g2's disk floor above any free space: its store takes nothing more.
    g2!.broker.reload({ ...g2!.broker.config, minFreeDiskBytes: Number.MAX_SAFE_INTEGER });
    await waitFor(() => g2!.broker.disk?.low === true, 5000, "g2 sees its disk below the floor");
    await g2!.broker.moves.request("full/v1", "g2");
    await waitFor(() => g2!.broker.moves.status()[0]?.state === "rolled-back", 20_000, "the move is rolled back");
    expect(g2!.broker.moves.status()[0]!.reason).toContain("DISK_FULL");
    await waitFor(() => g1!.broker.placement.status()!.groups.g1?.queues.includes("full/v1"), 5000, "g1 still owns the queue");
    await publisher.send("full/v1/a", { n: 200 });
    expect(g1!.broker.queues.get("full/v1")!.held).toBe(201);
  });
});

describe("moving a queue with a delayed requeue (real etcd)", () => {
  it("a message nacked with a delay keeps its delay on the target, while new messages are delivered there at once", async () => {
    const [g1, g2] = await groups(["g1", "g2"], { channels: { "later/v1": { group: "g1" } } });
    const publisher = await client(g1!);
    const consumer = await client(g1!);
    const deliveries: { n: number; at: number }[] = [];
    let nackedAt = 0;
    consumer.consume("later/v1/*", (error, message, done) => {
      if (error) return;
      const n = (message as { n: number }).n;
      deliveries.push({ n, at: Date.now() });
      if (n === 0 && nackedAt === 0) {
        nackedAt = Date.now();
        return done(false, 2); // 2 s
      }
      done();
    }, { prefetch: 10 });
    await publisher.send("later/v1/a", { n: 0 });
    await waitFor(() => g1!.broker.queues.get("later/v1")?.depth().delayed === 1, 5000, "n = 0 delayed on g1");

    await g2!.broker.moves.request("later/v1", "g2");
    await waitFor(() => g1!.broker.moves.status()[0]?.state === "done", 20_000, "the move is done");
    await publisher.send("later/v1/a", { n: 1 });
    await waitFor(() => deliveries.some((d) => d.n === 1), 10_000, "n = 1 delivered by g2 at once");
    expect(g2!.broker.queues.get("later/v1")!.depth().delayed).toBe(1); // n = 0 still waits
    expect(deliveries.filter((d) => d.n === 0)).toHaveLength(1);
    // The target's store has the delay too: a restart of the target would keep it.
    const store = g2!.broker.store;
    if (!canPage(store)) throw new Error("the target's store pages");
    const delayedId = [...g2!.broker.queues.get("later/v1")!.delayedCopies()][0]!.message.id;
    const dueOnDisk = () => store.readQueue("later/v1", 0, 10).find((row) => row.id === delayedId)?.notBefore ?? 0;
    await waitFor(() => dueOnDisk() > 0, 5000, "the delay on the target's disk");
    expect(dueOnDisk() - nackedAt).toBeGreaterThanOrEqual(1900);
    expect(dueOnDisk() - nackedAt).toBeLessThan(3000);
    await waitFor(() => deliveries.filter((d) => d.n === 0).length === 2, 10_000, "n = 0 delivered once its delay is over");
    expect(deliveries.findLast((d) => d.n === 0)!.at - nackedAt).toBeGreaterThanOrEqual(1900);
  });
});

describe("a delayed message sent again at the fence to a target that pages (real etcd)", () => {
  it("is not stored twice when the target holds it in its store only; one it holds in memory gets the delay on its disk", async () => {
    const [g1, g2] = await groups(["g1", "g2"], {
      durability: "fsync",
      channels: { "twice/v1": { group: "g1", memoryBudgetBytes: 64 * 1024 } },
    });
    // The slowest pace there is: the move is still copying when the target pages.
    g1!.broker.reload({ ...g1!.broker.config, cluster: { ...g1!.broker.config.cluster, moveBytesPerSecond: 65_536 } });
    const publisher = await client(g1!);
    const total = 3000;
    await Promise.all(Array.from({ length: total }, (_, n) => publisher.send("twice/v1/a", { n, pad: "x".repeat(100) })));
    await g2!.broker.moves.request("twice/v1", "g2");
    await waitFor(() => (g2!.broker.queues.get("twice/v1")?.backlog.count ?? 0) > 0, 20_000, "the target pages part of what it took");
    const target = g2!.broker.queues.get("twice/v1")!;
    const store = g2!.broker.store;
    if (!canPage(store)) throw new Error("the target's store pages");
    // A row of the queue the target holds in its store only (not in memory).
    const row = store.readQueue("twice/v1", 0, 100_000).find((r) => !g2!.broker.moves.incomingMirror("twice/v1")!.get(r.id))!;
    expect(row).toBeDefined();
    const held = target.held;
    // The same message again, as the source sends a delayed one again at the fence.
    await g2!.broker.acceptMoved([OP.MOVE_APPEND as never, 1_000_000, row.id, row.queue, row.destination, row.body, row.created, 0, null], 5_000);
    expect(target.held).toBe(held);
    // A message the target holds in memory, stored already, sent again delayed (nacked on the
    // source after the snapshot took it): the delay is written to its row.
    const mirror = g2!.broker.moves.incomingMirror("twice/v1")!;
    const inMemory = store.readQueue("twice/v1", 0, 100_000).find((r) => mirror.get(r.id))!;
    expect(inMemory).toBeDefined();
    const sentAt = Date.now();
    await g2!.broker.acceptMoved([OP.MOVE_APPEND as never, 1_000_001, inMemory.id, inMemory.queue, inMemory.destination, inMemory.body, inMemory.created, 0, null], 5_000);
    expect(target.held).toBe(held);
    const dueOnDisk = () => store.readQueue("twice/v1", 0, 100_000).find((r) => r.id === inMemory.id)?.notBefore ?? 0;
    await waitFor(() => dueOnDisk() > 0, 5000, "the delay on the target's disk");
    expect(dueOnDisk() - sentAt).toBeGreaterThanOrEqual(4900);
    expect(dueOnDisk() - sentAt).toBeLessThan(6000);
    // The rest at the default pace (a reload applies to a move in progress).
    g1!.broker.reload({ ...g1!.broker.config, cluster: { ...g1!.broker.config.cluster, moveBytesPerSecond: 10 * 1024 * 1024 } });
    await waitFor(() => g1!.broker.moves.status()[0]?.state === "done", 30_000, "the move is done");
    expect(g2!.broker.queues.get("twice/v1")!.held).toBe(total);
  }, 90_000);
});
