/**
 * GET /statistics and GET /metrics: Prometheus text format (version 0.0.4).
 *
 * Keeps the original's statistic names so existing dashboards and alerts keep working, and fixes
 * what they meant: `*_per_seconds_average` are real per-second rates (the original reported a
 * running mean of the value 1), `dead_count` counts (it never did), ttl drops reach
 * `dropped_count`, and every metric has `# HELP` and `# TYPE` lines.
 */
import { Hono } from "hono";
import type { BrokerServer, Queue } from "../server/mod.ts";
import { handlersInfo } from "../server/mod.ts";
import { VERSION } from "../version.ts";

export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

type Kind = "counter" | "gauge";
type Sample = [labels: Record<string, string>, value: number];

class Exposition {
  #lines: string[] = [];

  metric(name: string, kind: Kind, help: string, samples: Sample[]): void {
    this.#lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${kind}`);
    for (const [labels, value] of samples) this.#lines.push(`${name}${formatLabels(labels)} ${formatValue(value)}`);
  }

  toString(): string {
    return this.#lines.join("\n") + "\n";
  }
}

/** The whole exposition for one scrape. */
export function renderMetrics(server: BrokerServer): string {
  const { broker } = server;
  const now = broker.now();
  const { counters } = broker.stats;
  const out = new Exposition();
  const queues = [...broker.queues.values()].sort((a, b) => a.name.localeCompare(b.name));
  const perQueue = (value: (queue: Queue) => number): Sample[] => queues.map((q) => [{ queue: q.name }, value(q)]);

  out.metric("kitten_mq_info_uptime", "gauge", "Broker uptime in seconds", [
    [{ version: VERSION, service: broker.config.serviceId, role: broker.isMaster ? "master" : "slave" }, broker.stats.uptimeSeconds(now)],
  ]);
  const broad = [
    ["sent", "Deliveries written to clients", "Deliveries written to clients per second"],
    ["received", "Messages accepted into queues", "Messages accepted into queues per second"],
    ["acked", "Acknowledgements received (acks and nacks)", "Acknowledgements received per second"],
  ] as const;
  for (const [name, help, rateHelp] of broad) {
    out.metric(`kitten_mq_messages_${name}_count`, "counter", help, [[{}, counters[name]]]);
    out.metric(`kitten_mq_messages_${name}_per_seconds_average`, "gauge", `${rateHelp}, over the last seconds`, [
      [{}, broker.stats.rate(name, now)],
    ]);
  }
  out.metric("kitten_mq_clients_connected", "gauge", "Open client connections", [[{}, broker.sessions.size]]);

  out.metric("kitten_mq_queue_messages_count", "counter", "Messages added to a queue", perQueue((q) => q.counters.received));
  out.metric(
    "kitten_mq_queue_messages_dropped_count",
    "counter",
    "Messages dropped by a queue: oldest waiting message over maxItemsInQueue, or waiting longer than ttl",
    perQueue((q) => q.counters.dropped + q.counters.expired),
  );
  out.metric("kitten_mq_queue_messages_timeout_count", "counter", "Deliveries not acked within requeueInterval", perQueue((q) => q.counters.timeout));
  out.metric("kitten_mq_queue_messages_dead_count", "counter", "Messages dead after requeueLimit deliveries", perQueue((q) => q.counters.dead));
  out.metric("kitten_mq_queue_messages_expired_count", "counter", "Waiting messages dropped after ttl (part of dropped_count)", perQueue((q) => q.counters.expired));
  out.metric("kitten_mq_queue_messages_delivered_count", "counter", "Deliveries (redeliveries included)", perQueue((q) => q.counters.delivered));
  out.metric("kitten_mq_queue_messages_acked_count", "counter", "Deliveries acked", perQueue((q) => q.counters.acked));
  out.metric("kitten_mq_queue_messages_nacked_count", "counter", "Deliveries nacked (requeued by the client)", perQueue((q) => q.counters.nacked));

  const depths = queues.map((q) => [q.name, q.depth()] as const);
  out.metric(
    "kitten_mq_queue_depth",
    "gauge",
    "Copies in a queue by state: ready (to deliver), inflight (unacked), delayed (nacked with a delay), waiting (no recipient yet)",
    depths.flatMap(([queue, depth]) =>
      (["ready", "inflight", "delayed", "waiting"] as const).map((state): Sample => [{ queue, state }, depth[state]])
    ),
  );
  renderStoreGauges(out, server, queues);
  const handlers = queues.map((q) => [q.name, handlersInfo(q)] as const);
  out.metric("kitten_mq_queue_consumers", "gauge", "Consumer registrations on a queue", handlers.map(([queue, list]) => [
    { queue },
    list.filter((h) => h.kind === "consume").length,
  ]));
  out.metric("kitten_mq_queue_listeners", "gauge", "Listening client ids on a queue", handlers.map(([queue, list]) => [
    { queue },
    new Set(list.filter((h) => h.kind === "listen").map((h) => h.group)).size,
  ]));
  return out.toString();
}

/** What each queue keeps on disk and how much of it is paged (durable queues; zeros for the others). */
function renderStoreGauges(out: Exposition, server: BrokerServer, queues: Queue[]): void {
  const { broker } = server;
  const usage = queues.map((q) => [q.name, broker.diskUsage(q.name)] as const);
  out.metric("kitten_mq_queue_disk_bytes", "gauge", "Estimated bytes a queue's messages take in the store", usage.map(([queue, u]) => [
    { queue },
    u.bytes,
  ]));
  out.metric("kitten_mq_queue_disk_messages", "gauge", "Messages of a queue in the store", usage.map(([queue, u]) => [{ queue }, u.messages]));
  out.metric(
    "kitten_mq_queue_paged_messages",
    "gauge",
    "Messages of a durable queue kept only in the store, beyond its memoryBudgetBytes",
    queues.map((q) => [{ queue: q.name }, q.backlog.count]),
  );
  const free = broker.disk?.free;
  if (free !== null && free !== undefined) {
    out.metric("kitten_mq_store_disk_free_bytes", "gauge", "Free bytes on the disk of the data directory (minFreeDiskBytes refuses sends below it)", [
      [{}, free],
    ]);
  }
}

export function metricsRoutes(server: BrokerServer): Hono {
  const app = new Hono();
  const scrape = () =>
    new Response(renderMetrics(server), { headers: { "content-type": METRICS_CONTENT_TYPE, "cache-control": "no-store" } });
  app.get("/statistics", scrape);
  app.get("/metrics", scrape);
  return app;
}

/** `{queue="orders/v1"}`; values escaped as the format requires (backslash, quote, newline). */
function formatLabels(labels: Record<string, string>): string {
  const parts = Object.entries(labels).map(([key, value]) =>
    `${key}="${value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`
  );
  return parts.length === 0 ? "" : `{${parts.join(",")}}`;
}

function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (!Number.isFinite(value)) return value > 0 ? "+Inf" : "-Inf";
  return Number.isInteger(value) ? String(value) : String(Math.round(value * 1000) / 1000);
}
