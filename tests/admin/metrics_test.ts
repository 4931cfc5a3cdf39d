import { afterEach, describe, expect, it } from "bun:test";
import { adminFixture, type Fixture } from "./_fixture.ts";

/** The statistics of the original product page, plus the dead count its README forgot. */
const SEED_NAMES = [
  "kitten_mq_info_uptime",
  "kitten_mq_messages_sent_count",
  "kitten_mq_messages_sent_per_seconds_average",
  "kitten_mq_messages_received_count",
  "kitten_mq_messages_received_per_seconds_average",
  "kitten_mq_messages_acked_count",
  "kitten_mq_messages_acked_per_seconds_average",
  "kitten_mq_queue_messages_count",
  "kitten_mq_queue_messages_dropped_count",
  "kitten_mq_queue_messages_timeout_count",
  "kitten_mq_queue_messages_dead_count",
];

let fixture: Fixture;
afterEach(async () => await fixture?.close());

async function scrape(f: Fixture, path = "/statistics"): Promise<{ text: string; value(name: string, labels?: string): number }> {
  const { status, text, headers } = await f.request(path);
  expect(status).toBe(200);
  expect(headers.get("content-type")).toStartWith("text/plain; version=0.0.4");
  return {
    text,
    value(name, labels = "") {
      const line = text.split("\n").find((l) => l.startsWith(`${name}${labels} `));
      if (!line) throw new Error(`no sample ${name}${labels} in:\n${text}`);
      return Number(line.split(" ").at(-1));
    },
  };
}

describe("admin statistics", () => {
  it("GET /statistics names every seed statistic with # HELP and # TYPE, per queue labelled", async () => {
    fixture = adminFixture();
    await fixture.send("orders/v1/1", "a");
    const { text } = await scrape(fixture);
    const lines = text.trimEnd().split("\n");
    for (const name of SEED_NAMES) {
      const help = lines.indexOf(lines.find((l) => l.startsWith(`# HELP ${name} `))!);
      expect(help).toBeGreaterThanOrEqual(0);
      expect(lines[help + 1]).toMatch(new RegExp(`^# TYPE ${name} (counter|gauge)$`));
      expect(lines[help + 2]).toStartWith(name);
    }
    // Every sample line is `name{labels} number`, the format Prometheus parses.
    for (const line of lines.filter((l) => !l.startsWith("#"))) {
      expect(line).toMatch(/^[a-z_]+(\{[a-z_]+="[^"\n]*"(,[a-z_]+="[^"\n]*")*\})? -?[0-9.e+]+$/);
    }
    expect(text).toContain(`kitten_mq_queue_messages_count{queue="orders/v1"} 1`);
    expect(text).toContain(`kitten_mq_queue_depth{queue="orders/v1",state="waiting"} 1`);
    expect(text).toMatch(/kitten_mq_info_uptime\{version="[0-9A-Za-z.+-]+",service="broker-1",role="master"\} /);
  });

  it("GET /statistics keeps the seed's names and GET /metrics has none of them", async () => {
    fixture = adminFixture();
    await fixture.send("orders/v1/1", "a");
    const statistics = (await fixture.request("/statistics")).text;
    const metrics = (await fixture.request("/metrics")).text;
    for (const name of SEED_NAMES) {
      expect(statistics).toContain(`# TYPE ${name} `);
      expect(metrics).not.toContain(`# TYPE ${name} `);
    }
    expect(metrics).toContain(`kitten_mq_queue_messages_received_total{queue="orders/v1"} 1`);
  });

  it("*_per_seconds_average are real rates that follow the traffic (the original's were 0 or 1)", async () => {
    const f = fixture = adminFixture({ listenerPrefetch: 1000 });
    let m = await scrape(f);
    expect(m.value("kitten_mq_messages_received_per_seconds_average")).toBe(0);
    const listener = f.subscribe(f.session("audit"), "listen", "orders/v1", ["*"]);
    for (let i = 0; i < 10; i++) await f.send(`orders/v1/${i}`, i);
    f.ackAll(listener);
    f.clock.advance(2000);
    m = await scrape(f);
    expect(m.value("kitten_mq_messages_received_count")).toBe(10);
    expect(m.value("kitten_mq_messages_received_per_seconds_average")).toBe(5);
    expect(m.value("kitten_mq_messages_sent_per_seconds_average")).toBe(5);
    expect(m.value("kitten_mq_messages_acked_per_seconds_average")).toBe(5);
    // Twelve quiet seconds later the window (10 s) holds no event: the rates fall back to 0.
    for (let i = 0; i < 12; i++) {
      f.clock.advance(1000);
      f.server.broker.stats.sample(f.clock.now);
    }
    m = await scrape(f);
    expect(m.value("kitten_mq_messages_received_per_seconds_average")).toBe(0);
    expect(m.value("kitten_mq_messages_received_count")).toBe(10);
  });

  it("dead, dropped (overflow and ttl) and timeout counts are counted per queue", async () => {
    const f = fixture = adminFixture({
      requeueInterval: 1,
      channels: { "jobs/v1": { requeueLimit: 1 }, "full/v1": { maxItemsInQueue: 1 }, "ttl/v1": { ttl: 1 } },
    });
    const worker = f.subscribe(f.session("w"), "consume", "jobs/v1", ["*"]);
    await f.send("jobs/v1/1", "poison");
    const copy = [...worker.inflight.values()][0]!;
    f.server.broker.queues.get("jobs/v1")!.nack(copy, 0); // the only delivery allowed: it is dead now
    for (let i = 0; i < 3; i++) await f.send("full/v1/1", i);
    await f.send("ttl/v1/1", "expires");
    const slow = f.subscribe(f.session("slow"), "consume", "jobs/v1", ["2"]);
    await f.send("jobs/v1/2", "times out");
    f.clock.advance(1500);
    f.server.broker.tick();
    const m = await scrape(f);
    expect(m.value("kitten_mq_queue_messages_dead_count", `{queue="jobs/v1"}`)).toBe(2); // poison, then the timed-out one
    expect(m.value("kitten_mq_queue_messages_timeout_count", `{queue="jobs/v1"}`)).toBe(1);
    expect(m.value("kitten_mq_queue_messages_dropped_count", `{queue="full/v1"}`)).toBe(2);
    expect(m.value("kitten_mq_queue_messages_dropped_count", `{queue="ttl/v1"}`)).toBe(1);
    expect(m.value("kitten_mq_queue_messages_expired_count", `{queue="ttl/v1"}`)).toBe(1);
    expect(m.value("kitten_mq_queue_consumers", `{queue="jobs/v1"}`)).toBe(2);
    expect(slow.inflight.size).toBe(0);
  });
});
