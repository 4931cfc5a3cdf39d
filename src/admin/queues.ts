/**
 * Queue routes. A queue is named `endpoint/version`; in URLs it is two path segments
 * (`/queues/orders/v1`), and `/queues/orders%2Fv1` is accepted too (app.ts rewrites it), as
 * 0.12's dashboard and the links it left behind encode it.
 *
 *   GET    /queues                                       every queue: its group, depths, counters, rates of the last second, handlers
 *   GET    /queues/:endpoint/:version                    one queue: its group, depths per id, consumers, listeners
 *   GET    /queues/:endpoint/:version/messages?limit&offset[&id]   live copies, with a body preview (of one id)
 *   GET    /queues/:endpoint/:version/messages/:messageId     one message, full body, its copies
 *   DELETE /queues/:endpoint/:version[?id=destination]   purge ready, delayed and waiting copies
 *
 * Reads never create a queue: an unknown queue or id is a 404, and leaves the broker unchanged.
 */
import { type Context, Hono } from "hono";
import * as v from "valibot";
import { KittenError } from "../protocol/errors.ts";
import type { BrokerServer, HandlerInfo, Peer, Queue } from "../server/mod.ts";
import { depthById, handlerCounts, handlersInfo, message as messageCopies, messages as messagePage } from "../server/mod.ts";
import { copyView, messageView } from "./display.ts";
import { queueGroups } from "./groups.ts";

/** At most this many messages per page: a page is built in memory and serialised at once. */
export const MAX_PAGE = 1000;
export const DEFAULT_PAGE = 50;

export function queueRoutes(server: BrokerServer): Hono {
  const app = new Hono();
  const { broker } = server;

  app.get("/", (c) => {
    const queues = [...broker.queues.values()].sort((a, b) => a.name.localeCompare(b.name));
    const groups = queueGroups(server, queues.map((queue) => queue.name));
    return c.json({
      queues: queues.map((queue) => ({ ...queueSummary(queue, broker, groups.get(queue.name)!), rates: queueRates(server, queue.name) })),
    });
  });

  app.get("/:endpoint/:version", (c) => {
    const queue = findQueue(server, c);
    const sessions = sessionsBySink(server);
    const ids = [...depthById(queue)].map(([id, depth]) => ({ id, ...depth })).sort((a, b) => a.id.localeCompare(b.id));
    const handlers = handlersInfo(queue).map((handler) => handlerView(handler, sessions));
    return c.json({
      ...queueSummary(queue, broker, queueGroups(server, [queue.name]).get(queue.name)!),
      live: queue.live,
      ids,
      consumers: handlers.filter((handler) => handler.kind === "consume"),
      listeners: handlers.filter((handler) => handler.kind === "listen"),
    });
  });

  app.get("/:endpoint/:version/messages", (c) => {
    const queue = findQueue(server, c);
    const limit = intQuery(c, "limit", 1, MAX_PAGE, DEFAULT_PAGE);
    const offset = intQuery(c, "offset", 0, Number.MAX_SAFE_INTEGER, 0);
    const id = c.req.query("id");
    if (id === "") throw new KittenError("BAD_REQUEST", `Cannot list messages of "${queue.name}": id must be a non-empty destination id`);
    let total: number;
    if (id === undefined) {
      const depth = queue.depth();
      total = depth.ready + depth.inflight + depth.delayed + depth.waiting;
    } else {
      const depth = depthById(queue).get(id);
      total = depth ? depth.ready + depth.inflight + depth.delayed + depth.waiting : 0;
    }
    const messages = messagePage(queue, limit, offset, id).map((copy) => copyView(queue.name, copy));
    return c.json({ queue: queue.name, id: id ?? null, total, limit, offset, messages });
  });

  app.get("/:endpoint/:version/messages/:messageId", (c) => {
    const queue = findQueue(server, c);
    const messageId = c.req.param("messageId");
    const copies = messageCopies(queue, messageId);
    if (copies.length === 0) {
      throw new KittenError("NOT_FOUND", `Cannot find message "${messageId}" in queue "${queue.name}": it was acked, purged or never sent there`);
    }
    return c.json(messageView(queue.name, copies));
  });

  app.delete("/:endpoint/:version", (c) => {
    const queue = findQueue(server, c);
    const id = c.req.query("id");
    if (id === "") throw new KittenError("BAD_REQUEST", `Cannot purge "${queue.name}": id must be a non-empty destination id`);
    // Copies in memory, then the messages paged to the store beyond the queue's memory budget.
    const purged = queue.purge(id) + broker.purgePaged(queue, id);
    broker.log.info("admin", `queue=${queue.name};id=${id ?? "(all)"};purged=${purged};purged by an operator`);
    return c.json({ queue: queue.name, id: id ?? null, purged });
  });

  // One segment without a slash cannot name a queue: say how to name one instead of a bare 404.
  app.all("/:name", (c) => {
    throw new KittenError(
      "NOT_FOUND",
      `Cannot find queue "${c.req.param("name")}": queues are named "endpoint/version" (/queues/endpoint/version or /queues/endpoint%2Fversion)`,
    );
  });
  return app;
}

/** Per-second rates of the last second, from the broker's history (zeros for a queue it does not track). */
function queueRates(server: BrokerServer, name: string) {
  const track = server.broker.stats.history.queue(name);
  return { received: track?.last("received") ?? 0, delivered: track?.last("delivered") ?? 0, acked: track?.last("acked") ?? 0 };
}

/**
 * What GET /queues shows of each queue. `group`: the group that owns it (groups.ts: with
 * cluster.etcd, null while it is not placed; without, this broker's own group). `paged`:
 * messages of a durable queue left in the store beyond its memory budget; `disk`: the queue's
 * rows in the store and their estimated bytes. Unbounded settings (Infinity) show as null in JSON.
 */
export function queueSummary(queue: Queue, broker: BrokerServer["broker"], group: string | null) {
  return {
    name: queue.name,
    group,
    depth: queue.depth(),
    paged: queue.backlog.count,
    disk: broker.diskUsage(queue.name),
    counters: { ...queue.counters },
    ...handlerCounts(queue),
    settings: { ...queue.settings },
  };
}

/** A handler with its connection's client id (the sink of a handler is its session). */
function handlerView(handler: HandlerInfo, sessions: Map<unknown, Peer>) {
  const { sink: _sink, ...rest } = handler;
  return { clientId: sessions.get(handler.sink)?.clientId ?? null, ...rest };
}

export function sessionsBySink(server: BrokerServer): Map<unknown, Peer> {
  return new Map([...server.broker.sessions].map((session) => [session, session]));
}

function findQueue(server: BrokerServer, c: Context): Queue {
  const name = `${c.req.param("endpoint")}/${c.req.param("version")}`;
  const queue = server.broker.queues.get(name);
  if (!queue) throw new KittenError("NOT_FOUND", `Cannot find queue "${name}": no message or registration has used it`);
  return queue;
}

/** A query parameter that must be an integer in [min, max]; absent → `fallback`. */
function intQuery(c: Context, name: string, min: number, max: number, fallback: number): number {
  const raw = c.req.query(name);
  if (raw === undefined) return fallback;
  const schema = v.pipe(v.string(), v.regex(/^\d{1,16}$/), v.transform(Number), v.minValue(min), v.maxValue(max));
  const result = v.safeParse(schema, raw);
  if (result.success) return result.output;
  const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`;
  throw new KittenError(
    "BAD_REQUEST",
    `Cannot read query parameter "${name}": must be an integer ${range}: current value is ${JSON.stringify(raw)}`,
  );
}
