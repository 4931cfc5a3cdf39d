/**
 * GET /metrics as Prometheus users check it: `promtool check metrics` (Debian package
 * `prometheus`) on a real broker that carried traffic over TCP, with a durable store so that
 * every histogram has observations. The test fails, not skips, when promtool is missing.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { join } from "node:path";
import { Client } from "../../mod.ts";
import { createAdminApp } from "../../src/admin/mod.ts";
import { type BrokerServer, memoryLogger, parseConfig, startBroker } from "../../src/server/mod.ts";
import { clientOptions, waitFor } from "../helpers/broker.ts";
import { TempDirs } from "../helpers/temp_dir.ts";
import { adminFixture } from "./_fixture.ts";

const PROMTOOL = Bun.which("promtool");
const temps = new TempDirs("kitten-prometheus-");
const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await Promise.resolve(cleanup()).catch(() => {});
  temps.removeAll();
});

/** A durable broker that has confirmed, delivered and acked `count` messages over TCP. */
async function brokerWithTraffic(count: number): Promise<BrokerServer> {
  const dir = temps.make();
  const server = startBroker(parseConfig({
    socketServer: { port: 0 },
    isManagementInterface: false,
    durability: "fsync",
    registeredClientsPath: join(dir, "clients"),
    dataDirectory: join(dir, "data"),
  }), { logger: memoryLogger() });
  cleanups.push(() => server.stop());
  const host = { host: `127.0.0.1:${server.port}@broker-1` };
  const mq = new Client();
  cleanups.push(() => mq.disconnect());
  await mq.connect(clientOptions(host));
  let acked = 0;
  mq.consume("orders/v1/*", (_error: unknown, _message: unknown, done: () => void) => {
    done();
    acked++;
  });
  await Promise.all(Array.from({ length: count }, (_, i) => mq.send(`orders/v1/${i % 3}`, { order: i })));
  await waitFor(() => server.broker.queues.get("orders/v1")?.counters.acked === count, 10_000, "every message acked");
  return server;
}

function promtool(text: string): { code: number; output: string } {
  if (PROMTOOL === null) {
    throw new Error("promtool is missing: apt-get install -y prometheus (it provides promtool; .ci/run installs it)");
  }
  const result = Bun.spawnSync([PROMTOOL, "check", "metrics"], { stdin: new TextEncoder().encode(text) });
  return { code: result.exitCode, output: result.stdout.toString() + result.stderr.toString() };
}

function sample(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  if (!line) throw new Error(`no sample ${series} in:\n${text}`);
  return Number(line.slice(series.length + 1));
}

describe("GET /metrics", () => {
  it("GET /metrics passes promtool check metrics with no complaint on a broker with traffic", async () => {
    const server = await brokerWithTraffic(200);
    const text = await (await createAdminApp(server).request("/metrics")).text();
    const checked = promtool(text);
    expect(checked.output).toBe("");
    expect(checked.code).toBe(0);
    // The same check does find the seed's names wanting: promtool is really judging.
    const statistics = await (await createAdminApp(server).request("/statistics")).text();
    expect(promtool(statistics).output).toContain("counter metrics should have \"_total\" suffix");

    expect(sample(text, `kitten_mq_queue_messages_received_total{queue="orders/v1"}`)).toBe(200);
    expect(sample(text, `kitten_mq_queue_acks_total{queue="orders/v1"}`)).toBe(200);
    expect(sample(text, "kitten_mq_messages_sent_total")).toBe(200);
    // 200 sends and deliveries, one in 64 timed (the first included): 4 of each.
    expect(sample(text, "kitten_mq_publish_confirm_seconds_count")).toBe(4);
    expect(sample(text, "kitten_mq_send_deliver_seconds_count")).toBe(4);
    expect(sample(text, `kitten_mq_publish_confirm_seconds_bucket{le="+Inf"}`)).toBe(4);
    expect(sample(text, "kitten_mq_store_commit_seconds_count")).toBeGreaterThan(0);
    expect(sample(text, "kitten_mq_store_commit_seconds_sum")).toBeGreaterThan(0);
    expect(sample(text, "process_resident_memory_bytes")).toBeGreaterThan(1_000_000);
    expect(sample(text, "process_open_fds")).toBeGreaterThan(2);
    expect(sample(text, "process_cpu_seconds_total")).toBeGreaterThan(0);
    expect(text).toMatch(/^kitten_mq_event_loop_lag_seconds [0-9.e-]+$/m);
    expect(text).toMatch(/^kitten_mq_broker_info\{version="[0-9A-Za-z.+-]+",service="broker-1",role="master"\} 1$/m);
  }, 30_000);

  it("stats.addGauge() adds a gauge to GET /metrics with no change to the admin code", async () => {
    const fixture = adminFixture();
    cleanups.push(() => fixture.close());
    let lag = 0.25;
    fixture.server.broker.stats.addGauge({
      name: "kitten_mq_test_peer_lag_seconds",
      help: "A test gauge",
      read: () => [[{ peer: "broker-2" }, lag]],
    });
    let text = (await fixture.request("/metrics")).text;
    expect(text).toContain("# TYPE kitten_mq_test_peer_lag_seconds gauge\nkitten_mq_test_peer_lag_seconds{peer=\"broker-2\"} 0.25\n");
    lag = 1.5;
    text = (await fixture.request("/metrics")).text;
    expect(text).toContain(`kitten_mq_test_peer_lag_seconds{peer="broker-2"} 1.5`);
  });

  it("GET /metrics counts drops by reason and depths by state, per queue", async () => {
    const f = adminFixture({ channels: { "full/v1": { maxItemsInQueue: 1 }, "ttl/v1": { ttl: 1 } } });
    cleanups.push(() => f.close());
    for (let i = 0; i < 3; i++) await f.send("full/v1/1", i);
    await f.send("ttl/v1/1", "expires");
    f.clock.advance(1500);
    f.server.broker.tick();
    const text = (await f.request("/metrics")).text;
    expect(sample(text, `kitten_mq_queue_messages_dropped_total{queue="full/v1",reason="overflow"}`)).toBe(2);
    expect(sample(text, `kitten_mq_queue_messages_dropped_total{queue="ttl/v1",reason="ttl"}`)).toBe(1);
    expect(sample(text, `kitten_mq_queue_messages{queue="full/v1",state="waiting"}`)).toBe(1);
  });
});
