/**
 * The admin HTTP app (Hono), built without a port so tests call `app.request()`; serve.ts
 * binds it with Bun.serve.
 *
 * Public: `GET /` (the dashboard shell: it holds no data and asks for the token itself) and
 * `GET /health`. Everything else needs `Authorization: Bearer <admin.token>` when a token is
 * set, and is refused outright when the app is served on a non-loopback host without one
 * (fail closed, even if a reload removed the token). The token is read on every request, so a
 * reload rotates it. Without a token, requests must name a loopback host and come from no other
 * site (DNS rebinding, CSRF: see checkLocalRequest).
 *
 * Errors are JSON `{code, message, details?}` with the status of the code in ERRORS; one
 * onError does the mapping, and anything else is a logged 500: no request can crash the broker.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { Hono, type MiddlewareHandler } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { getPath } from "hono/utils/url";
import { ERRORS, KittenError } from "../protocol/errors.ts";
import { type BrokerServer, isLoopbackHost } from "../server/mod.ts";
import { clientRoutes } from "./clients.ts";
import { controlRoutes, healthRoutes, type StopHandler } from "./control.ts";
import { dashboardRoutes } from "./dashboard.ts";
import { groupRoutes } from "./groups.ts";
import { historyRoutes } from "./history.ts";
import { metricsRoutes } from "./metrics.ts";
import { moveRoutes } from "./moves.ts";
import { publishRoutes } from "./publish.ts";
import { queueRoutes } from "./queues.ts";

export interface AdminOptions {
  /** The host the app is served on (default `admin.host`); a non-loopback host always needs the token. */
  host?: string;
  /** Runs POST /soft-stop and /stop; default `server.softStop(graceMs)`. */
  stop?: StopHandler;
}

export function createAdminApp(server: BrokerServer, options: AdminOptions = {}): Hono {
  const host = options.host ?? server.broker.config.admin.host;
  const stop = options.stop ?? ((graceMs) => void server.softStop(graceMs));
  const app = new Hono({ getPath: (request) => splitQueueName(getPath(request)) });

  app.onError((error, c) => {
    if (error instanceof KittenError) {
      if (error.code === "UNAUTHORIZED") c.header("WWW-Authenticate", 'Bearer realm="kitten-mq"');
      const body = { code: error.code, message: error.message, ...(error.details === undefined ? {} : { details: error.details }) };
      return c.json(body, ERRORS[error.code].status as ContentfulStatusCode);
    }
    server.broker.log.error("admin", `${c.req.method} ${c.req.path}: ${(error as Error)?.stack ?? error}`);
    return c.json({ code: "INTERNAL", message: `Cannot ${c.req.method} ${c.req.path}: internal error: ${(error as Error)?.message ?? error}` }, 500);
  });
  app.notFound((c) => c.json({ code: "NOT_FOUND", message: `Cannot ${c.req.method} ${c.req.path}: no such route` }, 404));

  app.use("*", async (c, next) => {
    await next();
    c.header("Cache-Control", "no-store"); // live numbers: a cached reply would be a wrong one
    c.header("X-Content-Type-Options", "nosniff");
  });
  app.route("/", dashboardRoutes(server));
  app.route("/", healthRoutes(server));
  app.use("*", requireToken(server, host));
  app.route("/", metricsRoutes(server));
  app.route("/", historyRoutes(server));
  app.route("/", publishRoutes(server));
  app.route("/", controlRoutes(server, stop));
  app.route("/", groupRoutes(server));
  app.route("/", moveRoutes(server)); // before /queues: POST /queues/:endpoint/:version/move
  app.route("/queues", queueRoutes(server));
  app.route("/clients", clientRoutes(server));
  return app;
}

/**
 * `/queues/orders%2Fv1/...` → `/queues/orders/v1/...` (and `/moves/orders%2Fv1`). An endpoint
 * never contains `%` or `/`, so the first `%2F` after it can only be the queue name's separator.
 */
export function splitQueueName(path: string): string {
  return path.replace(/^\/(queues|moves)\/([A-Za-z0-9_-]+)%2[Ff]/, "/$1/$2/");
}

function requireToken(server: BrokerServer, host: string): MiddlewareHandler {
  return async (c, next) => {
    const token = server.broker.config.admin.token;
    const action = `Cannot ${c.req.method} ${c.req.path}`;
    if (token === null) {
      if (!isLoopbackHost(host)) {
        throw new KittenError("UNAUTHORIZED", `${action}: admin.token must be set while the admin API listens on "${host}"`);
      }
      checkLocalRequest(c.req.raw, action);
      return await next();
    }
    const match = /^Bearer +(\S+)$/i.exec(c.req.header("authorization") ?? "");
    if (!match || !sameSecret(match[1]!, token)) {
      throw new KittenError("UNAUTHORIZED", `${action}: send the admin token as "Authorization: Bearer <admin.token>"`);
    }
    await next();
  };
}

/**
 * Without a token, loopback is the only protection, and a web page the operator visits can
 * reach loopback too: by DNS rebinding (its own name resolving to 127.0.0.1, so the Host
 * header is not a loopback name) or by a cross-site form POST (CSRF: an Origin of another
 * site). Both are refused; the CLI sends no Origin and the dashboard is same-origin.
 */
function checkLocalRequest(request: Request, action: string): void {
  const host = request.headers.get("host") ?? new URL(request.url).host;
  const hostname = host.startsWith("[") ? host.slice(0, host.indexOf("]") + 1) : host.replace(/:\d+$/, "");
  if (!isLoopbackHost(hostname)) {
    throw new KittenError("NOT_ALLOWED", `${action}: the Host header "${host}" is not a loopback name; set admin.token to use other names`);
  }
  const origin = request.headers.get("origin");
  if (request.method !== "GET" && request.method !== "HEAD" && origin !== null && originHost(origin) !== host) {
    throw new KittenError("NOT_ALLOWED", `${action}: cross-site request from origin "${origin}" refused`);
  }
}

function originHost(origin: string): string | null {
  try {
    return new URL(origin).host;
  } catch {
    return null; // "null" (sandboxed pages, file:) is never this origin
  }
}

/** Compares digests in constant time: the time taken says nothing about how much matched. */
function sameSecret(given: string, expected: string): boolean {
  const digest = (text: string) => createHash("sha256").update(text).digest();
  return timingSafeEqual(digest(given), digest(expected));
}
