/**
 * Client routes: who is connected, whose keys are pinned, and un-pinning for key rotation.
 *
 *   GET    /clients               connected sessions with their registrations; pinned client ids
 *   DELETE /clients/:clientId/key forget the pinned key: the next connection pins its new key
 *
 * Un-pinning does not close the client's open connections: they authenticated with the old
 * key, which was valid when they did. Restart the client with its new key pair afterwards.
 */
import { Hono } from "hono";
import { KittenError } from "../protocol/errors.ts";
import type { BrokerServer } from "../server/mod.ts";
import { handlersInfo } from "../server/mod.ts";
import { sessionsBySink } from "./queues.ts";

export function clientRoutes(server: BrokerServer): Hono {
  const app = new Hono();
  const { broker } = server;

  app.get("/", async (c) => {
    const sessions = sessionsBySink(server);
    const subscriptions = new Map<unknown, object[]>();
    for (const queue of broker.queues.values()) {
      for (const { sink, ...handler } of handlersInfo(queue)) {
        if (!sessions.has(sink)) continue;
        const list = subscriptions.get(sink) ?? [];
        list.push({ queue: queue.name, ...handler });
        subscriptions.set(sink, list);
      }
    }
    const pinned = await broker.registry.list();
    const pinnedSet = new Set(pinned);
    const connected = new Set<string>();
    const clients = [...broker.sessions].map((session) => {
      if (session.state === "open") connected.add(session.clientId);
      return {
        clientId: session.clientId || null, // empty until the hello names it
        state: session.state,
        unsentBytes: session.unsentBytes,
        pinned: pinnedSet.has(session.clientId),
        subscriptions: subscriptions.get(session) ?? [],
      };
    });
    clients.sort((a, b) => (a.clientId ?? "").localeCompare(b.clientId ?? ""));
    return c.json({
      clients,
      pinned: pinned.map((clientId) => ({ clientId, connected: connected.has(clientId) })),
    });
  });

  app.delete("/:clientId/key", async (c) => {
    const clientId = c.req.param("clientId");
    // unpin() validates the id first: BAD_CLIENT_ID (400) before any file is touched.
    if (!await broker.registry.unpin(clientId)) {
      throw new KittenError("NOT_FOUND", `Cannot unpin client "${clientId}": no key is pinned for this id`);
    }
    // Open sessions are left alone on purpose: closed now, a client still running with its old key
    // would reconnect and pin that key again before the operator restarts it with the new one.
    broker.log.info("admin", `client=${clientId};pinned key removed by an operator`);
    return c.json({ clientId, unpinned: true });
  });
  return app;
}
