/**
 * Serves the admin app with Bun.serve on `admin.host` (127.0.0.1 by default) and
 * `httpServerPort` (0 = a free port; the bound one is returned).
 *
 * Slow or idle clients cannot hold connections: `idleTimeout` (admin.idleTimeoutSeconds)
 * closes idle keep-alive connections, and Bun closes a connection whose request headers are
 * not complete after about 10 seconds whatever they trickle in (slowloris). Request bodies are
 * capped: only POST /publish reads one, a message of at most maxFrameSize bytes.
 */
import { KittenError } from "../protocol/errors.ts";
import type { BrokerServer, Config } from "../server/mod.ts";
import { type AdminOptions, createAdminApp } from "./app.ts";

/** Room for the JSON around a published body (POST /publish checks the body itself). */
const REQUEST_OVERHEAD = 64 * 1024;

export interface AdminServer {
  /** `http://127.0.0.1:8080` (https with TLS); IPv6 hosts in brackets. */
  readonly url: string;
  readonly hostname: string;
  /** The port actually bound (useful with `httpServerPort: 0`). */
  readonly port: number;
  /** Stops listening; open requests finish first unless `force`. */
  stop(force?: boolean): Promise<void>;
}

export function startAdmin(server: BrokerServer, config: Config = server.broker.config, options: AdminOptions = {}): AdminServer {
  const { host, tls, idleTimeoutSeconds } = config.admin;
  const app = createAdminApp(server, { host, ...options });
  let http: ReturnType<typeof Bun.serve>;
  try {
    http = Bun.serve({
      hostname: host,
      port: config.httpServerPort,
      idleTimeout: idleTimeoutSeconds,
      maxRequestBodySize: config.socketServer.maxFrameSize + REQUEST_OVERHEAD,
      tls: tls ? { cert: Bun.file(tls.cert), key: Bun.file(tls.key) } : undefined,
      fetch: app.fetch,
      error(error) {
        server.broker.log.error("admin", `request failed: ${error.stack ?? error}`);
        return Response.json({ code: "INTERNAL", message: `Cannot answer the request: internal error: ${error.message}` }, { status: 500 });
      },
    });
  } catch (error) {
    throw new KittenError(
      "CONFIG_INVALID",
      `Cannot start the admin API on ${host}:${config.httpServerPort} (admin.host, httpServerPort): ${(error as Error).message}`,
      undefined,
      { cause: error },
    );
  }
  const port = http.port ?? config.httpServerPort;
  const shownHost = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
  const url = `${tls ? "https" : "http"}://${shownHost}:${port}`;
  server.broker.log.info("admin", `listening on ${url}${config.admin.token === null ? "" : ";token required"}`);
  return {
    url,
    hostname: host,
    port,
    async stop(force = false) {
      await http.stop(force);
    },
  };
}
