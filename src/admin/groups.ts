/**
 * Where queues live when they are spread over groups (`cluster.etcd`): the queue map as this
 * broker sees it (server/placement.ts), for GET /groups, the `group` of each queue in GET
 * /queues, `kitten-mq groups`, the dashboard and GET /metrics.
 *
 *   GET /groups[?limit=N]   `{enabled, epoch, group, groups: {g: {brokers, queues, queueCount}}}`;
 *                           `limit` keeps the first N queues of each group (the dashboard's page);
 *                           without etcd: `enabled: false`, `groups: {}`
 */
import { type Context, Hono } from "hono";
import { KittenError } from "../protocol/errors.ts";
import type { BrokerServer } from "../server/mod.ts";
import type { Exposition, Sample } from "./exposition.ts";

/** At most this many `kitten_mq_queue_group_info` series per scrape: the map can hold far more queues. */
export const MAX_QUEUE_GROUP_SERIES = 10_000;

export interface GroupView {
  /** Live brokers of the group, `host:port@serviceId`, sorted. */
  brokers: string[];
  /** Its queues (`endpoint/version`), sorted; the first `limit` when one is asked. */
  queues: string[];
  /** How many queues the group owns, whatever `limit` kept. */
  queueCount: number;
}

export interface GroupsView {
  /** True when this broker follows a queue map (cluster.etcd). */
  enabled: boolean;
  /** The map's revision in etcd as this broker last saw it; 0 before it is read, or without etcd. */
  epoch: number;
  /** This broker's own group (cluster.group). */
  group: string;
  groups: Record<string, GroupView>;
}

export function groupsView(server: BrokerServer, limit = Infinity): GroupsView {
  const { placement, config } = server.broker;
  const status = placement.status();
  if (status === null) return { enabled: false, epoch: 0, group: config.cluster.group, groups: {} };
  const groups: Record<string, GroupView> = {};
  for (const name of Object.keys(status.groups).sort()) {
    const { brokers, queues } = status.groups[name]!;
    groups[name] = { brokers, queues: queues.length > limit ? queues.slice(0, limit) : queues, queueCount: queues.length };
  }
  return { enabled: true, epoch: status.epoch, group: status.group, groups };
}

/**
 * The group that owns each of `queues`: from the map with etcd (null for a queue not placed yet,
 * or before the map is read); without etcd every queue is served by this broker's own group.
 */
export function queueGroups(server: BrokerServer, queues: readonly string[]): Map<string, string | null> {
  const { placement, config } = server.broker;
  if (!placement.enabled) return new Map(queues.map((queue) => [queue, config.cluster.group]));
  const known = placement.known(queues).queues;
  return new Map(queues.map((queue) => [queue, known[queue]?.group ?? null]));
}

export function groupRoutes(server: BrokerServer): Hono {
  const app = new Hono();
  app.get("/groups", (c) => c.json(groupsView(server, limitQuery(c))));
  return app;
}

function limitQuery(c: Context): number {
  const raw = c.req.query("limit");
  if (raw === undefined) return Infinity;
  if (!/^\d{1,9}$/.test(raw)) {
    throw new KittenError(
      "BAD_REQUEST",
      `Cannot read query parameter "limit": must be an integer >= 0: current value is ${JSON.stringify(raw)}`,
    );
  }
  return Number(raw);
}

/**
 * The map in GET /metrics, only when the broker follows one (cluster.etcd): its epoch, each
 * group's queues and live brokers, and which group owns each queue (the first
 * MAX_QUEUE_GROUP_SERIES queues by name: one series per queue of the whole deployment would
 * grow without bound; the per-group counts stay exact).
 */
export function writeGroupMetrics(out: Exposition, server: BrokerServer): void {
  const view = groupsView(server);
  if (!view.enabled) return;
  const groups = Object.entries(view.groups);
  out.metric("kitten_mq_map_epoch", "gauge", "The queue map's revision in etcd as this broker last saw it (0 before it is read)", [
    [{}, view.epoch],
  ]);
  out.metric("kitten_mq_group_queues", "gauge", "Queues the queue map places on each group", groups.map(([group, g]): Sample => [
    { group },
    g.queueCount,
  ]));
  out.metric("kitten_mq_group_brokers", "gauge", "Live brokers of each group (their member keys in etcd)", groups.map(([group, g]): Sample => [
    { group },
    g.brokers.length,
  ]));
  const placed = groups.flatMap(([group, g]) => g.queues.map((queue) => [queue, group] as const));
  placed.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  out.metric(
    "kitten_mq_queue_group_info",
    "gauge",
    `Always 1: the group that owns a queue, as a label; at most ${MAX_QUEUE_GROUP_SERIES} series, ` +
      "the first queues by name (kitten_mq_group_queues has every count)",
    placed.slice(0, MAX_QUEUE_GROUP_SERIES).map(([queue, group]): Sample => [{ queue, group }, 1]),
  );
}
