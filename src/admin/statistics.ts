/**
 * GET /statistics: kitten-mq 0.12's statistic names, unchanged, so existing dashboards and
 * alerts keep working (GET /metrics follows Prometheus' conventions instead).
 *
 * The values are what the names say: `*_per_seconds_average` are per-second rates over the last
 * seconds, `dead_count` counts dead messages, ttl drops are in `dropped_count`, and every metric
 * has `# HELP` and `# TYPE` lines.
 */
import type { BrokerServer, Queue } from "../server/mod.ts";
import { VERSION } from "../version.ts";
import { Exposition, type Sample, writeQueueShape } from "./exposition.ts";

export function renderStatistics(server: BrokerServer): string {
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

  writeQueueShape(out, queues, "kitten_mq_queue_depth");
  return out.toString();
}
