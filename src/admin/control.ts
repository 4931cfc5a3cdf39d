/**
 * Broker-level routes: health, status, the effective config, reload and stopping.
 *
 *   GET  /health      public: 200 `{status: "ok"}`, 503 `{status: "stopping"}` (load balancers, systemd)
 *   GET  /status      version, role, uptime, counters, real rates, connections, totals
 *   GET  /config      the running config, tokens redacted
 *   POST /reload      re-reads the config file; a bad file changes nothing and every problem is listed
 *   POST /soft-stop   202; refuses new work, lets in-flight deliveries finish (30 s), then stops
 *   POST /stop        202; the same with a 5 s bound, as SIGTERM
 */
import { Hono } from "hono";
import { type BrokerServer, type Config, securityWarnings } from "../server/mod.ts";
import { VERSION } from "../version.ts";

/** How long soft-stop waits for in-flight deliveries (as SIGUSR1). */
export const SOFT_STOP_GRACE_MS = 30_000;
/** How long stop waits (as SIGTERM/SIGINT, and systemd's stop). */
export const STOP_GRACE_MS = 5_000;

/** Runs a requested stop; the CLI's start command passes one that also ends the process. */
export type StopHandler = (graceMs: number, reason: string) => void;

export function healthRoutes(server: BrokerServer): Hono {
  const app = new Hono();
  app.get("/health", (c) => {
    const stopping = server.broker.stopping;
    return c.json({ status: stopping ? "stopping" : "ok" }, stopping ? 503 : 200);
  });
  return app;
}

export function controlRoutes(server: BrokerServer, stop: StopHandler): Hono {
  const app = new Hono();
  const { broker } = server;

  app.get("/status", (c) => c.json(status(server)));
  app.get("/config", (c) => c.json({ configPath: server.configPath, config: redactConfig(broker.config) }));

  app.post("/reload", async (c) => {
    // `?force=true` promotes a slave that is not in sync (it may lose messages).
    const force = c.req.query("force") === "true";
    await server.reload({ force }); // CONFIG_INVALID or NOT_IN_SYNC, with details: app.onError answers
    broker.log.info("admin", `config reloaded from ${server.configPath} by an operator${force ? " (forced)" : ""}`);
    return c.json({ reloaded: true, configPath: server.configPath, config: redactConfig(broker.config) });
  });

  const stopRoute = (graceMs: number, reason: string) => () => {
    // After the reply is on its way: stopping closes this very server.
    setTimeout(() => stop(graceMs, reason), 10);
    return Response.json({ stopping: true, graceMs }, { status: 202 });
  };
  app.post("/soft-stop", stopRoute(SOFT_STOP_GRACE_MS, "soft-stop requested on the admin API"));
  app.post("/stop", stopRoute(STOP_GRACE_MS, "stop requested on the admin API"));
  return app;
}

/** What GET /status returns; `kitten-mq status` prints it. */
export function status(server: BrokerServer) {
  const { broker } = server;
  const now = broker.now();
  const totals = { ready: 0, inflight: 0, delayed: 0, waiting: 0 };
  for (const queue of broker.queues.values()) {
    const depth = queue.depth();
    for (const key of Object.keys(totals) as (keyof typeof totals)[]) totals[key] += depth[key];
  }
  return {
    version: VERSION,
    serviceId: broker.config.serviceId,
    role: broker.isMaster ? "master" : "slave",
    stopping: broker.stopping,
    uptimeSeconds: broker.stats.uptimeSeconds(now),
    configPath: server.configPath,
    broker: { host: server.hostname, port: server.port },
    connections: broker.sessions.size,
    queues: broker.queues.size,
    messages: totals,
    counters: { ...broker.stats.counters },
    rates: {
      sent: broker.stats.rate("sent", now),
      received: broker.stats.rate("received", now),
      acked: broker.stats.rate("acked", now),
    },
    pollIntervalHTTP: broker.config.pollIntervalHTTP,
    cluster: broker.cluster.status(),
    /** What makes the running config unsafe (also logged at start); empty when nothing does. */
    warnings: securityWarnings(broker.config),
  };
}

/** A deep copy of the config with every secret replaced: it is shown on the dashboard. */
export function redactConfig(config: Config): Config {
  const copy = structuredClone(config);
  if (copy.socketServer.token !== null) copy.socketServer.token = "(redacted)";
  if (copy.admin.token !== null) copy.admin.token = "(redacted)";
  return copy;
}
