import { afterEach, expect, it } from "bun:test";
import { join } from "node:path";
import { Client, type KittenError } from "../../mod.ts";
import { parseConfig } from "../../src/server/config/config.ts";
import { memoryLogger } from "../../src/server/log.ts";
import { type BrokerServer, startBroker } from "../../src/server/server.ts";
import { clientOptions, recorder, type Received, waitFor } from "../helpers/broker.ts";
import { TempDirs } from "../helpers/temp_dir.ts";

const dirs = new TempDirs("kitten-soft-stop-");
const undo: (() => unknown)[] = [];
afterEach(async () => {
  for (const step of undo.splice(0).reverse()) {
    try {
      await step();
    } catch { /* best effort */ }
  }
  dirs.removeAll();
});

function start(dataDirectory: string, port = 0): BrokerServer {
  const config = parseConfig({
    socketServer: { port, host: "127.0.0.1" },
    isManagementInterface: false,
    durability: "fsync",
    dataDirectory,
    registeredClientsPath: join(dataDirectory, "..", "clients"),
  });
  const server = startBroker(config, { logger: memoryLogger() });
  undo.push(() => server.stop());
  return server;
}

async function client(host: string): Promise<Client> {
  const mq = new Client();
  undo.push(() => mq.disconnect());
  await mq.connect(clientOptions({ host }, { maxPendingMessages: 100 }));
  return mq;
}

it("e2e: soft-stop: clients are told, and the sends made meanwhile are kept and confirmed by the broker after its restart", async () => {
  const data = join(dirs.make(), "data");
  const first = start(data);
  const host = `127.0.0.1:${first.port}@broker-1`;
  const producer = await client(host);
  const told: KittenError[] = [];
  producer.on("error", (error: KittenError) => told.push(error));
  const holder = await client(host);
  const held: Received[] = [];
  await holder.consume("stop/v1/1", recorder(held, { ack: false })).ready;
  for (let n = 0; n < 10; n++) await producer.send("stop/v1/1", { n });
  await waitFor(() => held.length === 1); // one delivery in flight keeps the soft stop waiting

  const stopped = first.softStop(1500);
  await waitFor(() => told.some((error) => error.code === "STOPPING"), 2000, "the producer told the broker is stopping");
  const outcomes: string[] = [];
  const during = Array.from({ length: 50 }, (_, i) =>
    producer.send("stop/v1/1", { n: 10 + i }).then(() => outcomes.push("confirmed"), (error) => outcomes.push(error.code))
  );
  await stopped;
  expect(outcomes).toEqual([]); // neither refused nor confirmed by a broker that took none of them
  await holder.disconnect(); // its unacked delivery goes to the consumer below after the restart

  start(data, first.port); // the same broker, restarted
  await Promise.all(during);
  expect(outcomes).toEqual(Array(50).fill("confirmed"));
  const consumer = await client(`127.0.0.1:${first.port}@broker-1`);
  const got: Received[] = [];
  await consumer.consume("stop/v1/1", recorder(got)).ready;
  await waitFor(() => new Set(got.map((r) => (r.message as { n: number }).n)).size === 60, 5000, "all 60 messages delivered");
});

it("e2e: soft-stop: sends beyond maxPendingMessages are refused with QUEUE_FULL while the broker is away", async () => {
  const data = join(dirs.make(), "data");
  const first = start(data);
  const producer = await client(`127.0.0.1:${first.port}@broker-1`);
  await first.softStop(100);
  const kept = Array.from({ length: 100 }, (_, n) => producer.send("stop/v1/1", { n }).then(() => "confirmed", (e) => e.code));
  const refused = await producer.send("stop/v1/1", { n: 100 }).then(() => "confirmed", (e) => e.code);
  expect(refused).toBe("QUEUE_FULL");
  start(data, first.port);
  expect(await Promise.all(kept)).toEqual(Array(100).fill("confirmed"));
});

it("e2e: soft-stop: the sends a stopping master refused are confirmed by the slave promoted after it", async () => {
  const root = dirs.make();
  const master = start(join(root, "a", "data"));
  const slave = startBroker(
    parseConfig({
      socketServer: { port: 0, host: "127.0.0.1" },
      isManagementInterface: false,
      isMaster: false,
      durability: "fsync",
      dataDirectory: join(root, "b", "data"),
      registeredClientsPath: join(root, "b", "clients"),
    }),
    { logger: memoryLogger() },
  );
  undo.push(() => slave.stop());
  const hosts = [`127.0.0.1:${master.port}@broker-1`, `127.0.0.1:${slave.port}@broker-1`];
  const producer = new Client();
  undo.push(() => producer.disconnect());
  producer.on("error", () => {});
  await producer.connect(clientOptions({ host: hosts[0]! }, { hosts }));
  await waitFor(() => producer.status().every((s) => s.connected), 3000, "both hosts connected");
  const holder = await client(hosts[0]!);
  const held: Received[] = [];
  await holder.consume("stop/v1/1", recorder(held, { ack: false })).ready;
  await producer.send("stop/v1/1", { n: 0 });
  await waitFor(() => held.length === 1);

  const stopped = master.softStop(300);
  await waitFor(() => master.broker.stopping);
  const outcomes: string[] = [];
  const during = Array.from({ length: 20 }, (_, i) =>
    producer.send("stop/v1/1", { n: 1 + i }).then(() => outcomes.push("confirmed"), (error) => outcomes.push(error.code))
  );
  await stopped;
  expect(outcomes).toEqual([]);
  slave.broker.reload(parseConfig({ ...slave.broker.config, isMaster: true })); // the operator promotes it
  await Promise.all(during);
  expect(outcomes).toEqual(Array(20).fill("confirmed"));
  expect(slave.broker.queues.get("stop/v1")?.live).toBe(21);
});
