/**
 * GET /history: the last 15 minutes, one point a second, that the broker keeps itself
 * (server/stats/history.ts), so a dashboard opened now draws full charts at once.
 *
 *   GET /history                      broker-wide: received, sent, acked (per second), depths, connections
 *   GET /history?queue=orders/v1      one queue: received, delivered, acked (per second), its depths
 *
 * `times` are the sample times (ms since epoch), oldest first; each series has one value per time.
 */
import { Hono } from "hono";
import { queueProblem } from "../protocol/channel.ts";
import { KittenError } from "../protocol/errors.ts";
import { type BrokerServer, HISTORY_MAX_QUEUES } from "../server/mod.ts";

export function historyRoutes(server: BrokerServer): Hono {
  const app = new Hono();
  const { broker } = server;
  app.get("/history", (c) => {
    const name = c.req.query("queue");
    const history = broker.stats.history;
    if (name === undefined) return c.json(history.broker.view(null));
    const problem = queueProblem(name);
    if (problem !== null) {
      throw new KittenError("BAD_REQUEST", `Cannot read the history of queue ${JSON.stringify(name)}: ${problem}`);
    }
    if (!broker.queues.has(name)) {
      throw new KittenError("NOT_FOUND", `Cannot read the history of queue "${name}": no message or registration has used it`);
    }
    const track = history.queue(name);
    if (track === null) {
      // Created less than a second ago (no point yet), or past the bound on tracked queues.
      if (history.queuesTracked < HISTORY_MAX_QUEUES) return c.json({ queue: name, stepSeconds: 1, times: [], series: {} });
      throw new KittenError(
        "NOT_FOUND",
        `Cannot read the history of queue "${name}": history is kept for the first ${HISTORY_MAX_QUEUES} queues only`,
      );
    }
    return c.json(track.view(name));
  });
  return app;
}
