/**
 * GET /metrics: the broker in Prometheus' conventions, clean under `promtool check metrics`:
 * counters end in `_total`, units are in the names (`_seconds`, `_bytes`), per-queue series carry
 * `queue="endpoint/version"`, rates are left to `rate()`, latencies are histograms, and the
 * process and runtime metrics are there. GET /statistics keeps 0.12's names (statistics.ts).
 *
 * A gauge from elsewhere in the server (cluster lag, sync state…) needs no change here: register
 * it with `broker.stats.addGauge({ name, help, read })` and it is listed at the end.
 */
import { Hono } from "hono";
import type { BrokerServer, Queue } from "../server/mod.ts";
import { VERSION } from "../version.ts";
import { Exposition, METRICS_CONTENT_TYPE, type Sample, writeQueueShape } from "./exposition.ts";
import { writeGroupMetrics } from "./groups.ts";
import { writeProcessMetrics } from "./process_metrics.ts";
import { renderStatistics } from "./statistics.ts";

export { METRICS_CONTENT_TYPE };

/** The whole exposition for one scrape. */
export function renderMetrics(server: BrokerServer): string {
  const { broker } = server;
  const { stats } = broker;
  const out = new Exposition();
  const queues = [...broker.queues.values()].sort((a, b) => a.name.localeCompare(b.name));
  const perQueue = (value: (queue: Queue) => number): Sample[] => queues.map((q) => [{ queue: q.name }, value(q)]);

  out.metric("kitten_mq_broker_info", "gauge", "Always 1: the broker's version, service id and role (master or slave)", [
    [{ version: VERSION, service: broker.config.serviceId, role: broker.role }, 1],
  ]);
  out.metric("kitten_mq_master", "gauge", "1 while this broker is the master (delivers and confirms), 0 as a slave or fenced", [
    [{}, broker.isMaster ? 1 : 0],
  ]);
  out.metric("kitten_mq_uptime_seconds", "gauge", "Seconds since the broker started", [[{}, stats.uptimeSeconds(broker.now())]]);
  out.metric("kitten_mq_messages_received_total", "counter", "Messages accepted into queues", [[{}, stats.counters.received]]);
  out.metric("kitten_mq_messages_sent_total", "counter", "Deliveries written to clients (one per copy: a fan-out to 3 listeners is 3)", [
    [{}, stats.counters.sent],
  ]);
  out.metric("kitten_mq_messages_acked_total", "counter", "Acknowledgements received, acks and nacks, one per delivered copy", [
    [{}, stats.counters.acked],
  ]);
  out.metric("kitten_mq_connections", "gauge", "Open client connections", [[{}, broker.sessions.size]]);
  out.metric("kitten_mq_queues", "gauge", "Queues the broker holds", [[{}, broker.queues.size]]);

  out.metric("kitten_mq_queue_messages_received_total", "counter", "Messages added to a queue", perQueue((q) => q.counters.received));
  out.metric("kitten_mq_queue_deliveries_total", "counter", "Deliveries from a queue, redeliveries included", perQueue((q) => q.counters.delivered));
  out.metric("kitten_mq_queue_acks_total", "counter", "Deliveries acked", perQueue((q) => q.counters.acked));
  out.metric("kitten_mq_queue_nacks_total", "counter", "Deliveries nacked (requeued by the client)", perQueue((q) => q.counters.nacked));
  out.metric("kitten_mq_queue_timeouts_total", "counter", "Deliveries not acked within requeueInterval", perQueue((q) => q.counters.timeout));
  out.metric("kitten_mq_queue_messages_dead_total", "counter", "Copies dead after requeueLimit deliveries", perQueue((q) => q.counters.dead));
  out.metric(
    "kitten_mq_queue_messages_dropped_total",
    "counter",
    "Waiting copies dropped: reason overflow (oldest over maxItemsInQueue) or ttl (waited longer than ttl)",
    queues.flatMap((q): Sample[] => [[{ queue: q.name, reason: "overflow" }, q.counters.dropped], [{ queue: q.name, reason: "ttl" }, q.counters.expired]]),
  );
  writeQueueShape(out, queues, "kitten_mq_queue_messages");
  renderStoreGauges(out, server, queues);
  writeGroupMetrics(out, server);

  const histograms = [
    ["kitten_mq_publish_confirm_seconds", "From a send handled to its confirmation queued (the commit included when durable); one send in 64 is timed", stats.publishConfirm],
    ["kitten_mq_send_deliver_seconds", "From a message's arrival to its first delivery (waiting time included; 1 ms resolution); one delivery in 64 is timed", stats.sendDeliver],
    ["kitten_mq_store_commit_seconds", "One commit of the durable store (transaction and fsync) for a group of messages", stats.commit],
  ] as const;
  for (const [name, help, histogram] of histograms) out.histogram(name, help, histogram.cumulative(), histogram.sum, histogram.count);

  out.metric("kitten_mq_event_loop_lag_seconds", "gauge", "Longest delay of the broker's 25 ms timer beyond its period during the last second", [
    [{}, stats.eventLoopLag],
  ]);
  writeProcessMetrics(out);
  for (const gauge of stats.gauges.values()) out.metric(gauge.name, gauge.type ?? "gauge", gauge.help, gauge.read());
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
  const reply = (text: string) => new Response(text, { headers: { "content-type": METRICS_CONTENT_TYPE, "cache-control": "no-store" } });
  app.get("/statistics", () => reply(renderStatistics(server)));
  app.get("/metrics", () => reply(renderMetrics(server)));
  return app;
}
