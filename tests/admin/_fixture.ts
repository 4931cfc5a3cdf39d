/**
 * A broker for admin-app tests: real BrokerServer (so reload and soft-stop are the real ones)
 * with an injected clock, a temp folder, and fake sessions that register consumers and
 * listeners without sockets. The admin app is called with `app.request()`: no admin port.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { subscribeHandler } from "../../src/server/registrations.ts";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Hono } from "hono";
import { type AdminOptions, createAdminApp } from "../../src/admin/mod.ts";
import { encode } from "../../src/protocol/cbor.ts";
import { type BrokerServer, memoryLogger, parseConfig, startBroker } from "../../src/server/mod.ts";
import type { Handler } from "../../src/server/queue/message.ts";
import { Session } from "../../src/server/session.ts";

export interface Fixture {
  server: BrokerServer;
  app: Hono;
  dir: string;
  configPath: string;
  logger: ReturnType<typeof memoryLogger>;
  /** The injected clock: `now` ms; `advance(ms)` moves it. */
  clock: { now: number; advance(ms: number): void };
  /** Accepts a message as a client's send would (the body is CBOR-encoded here). */
  send(channel: string, body: unknown, messageId?: string): Promise<void>;
  /** An open session of `clientId` (a connection with no socket: writes go nowhere). */
  session(clientId: string): Session;
  /** Registers a consumer or listener of `session` on `endpoint/version` for `ids`. */
  subscribe(session: Session, kind: "consume" | "listen", queue: string, ids: string[], prefetch?: number): Handler;
  /** Acks every delivery `handler` holds. */
  ackAll(handler: Handler): void;
  request(path: string, init?: RequestInit): Promise<{ status: number; body: any; headers: Headers; text: string }>;
  close(): Promise<void>;
}

let messageSeq = 0;

export function adminFixture(overrides: Record<string, unknown> = {}, options: AdminOptions = {}): Fixture {
  const dir = mkdtempSync(join(tmpdir(), "kitten-admin-"));
  const input = {
    socketServer: { port: 0 },
    httpServerPort: 0,
    durability: "memory",
    registeredClientsPath: join(dir, "clients"),
    dataDirectory: join(dir, "data"),
    ...overrides,
  };
  const configPath = join(dir, "kitten-mq.config.json");
  writeFileSync(configPath, JSON.stringify(input));
  const clock = {
    now: 1_700_000_000_000,
    advance(ms: number) {
      clock.now += ms;
    },
  };
  const logger = memoryLogger();
  const server = startBroker(parseConfig(input), { configPath, logger, now: () => clock.now });
  const app = createAdminApp(server, options);
  const broker = server.broker;
  let sub = 0;
  return {
    server,
    app,
    dir,
    configPath,
    logger,
    clock,
    async send(channel, body, messageId = `m-${++messageSeq}`) {
      await broker.send(channel, messageId, encode(body), { clientId: "sender", grants: broker.rules.forClient("sender") });
      broker.flush();
    },
    session(clientId) {
      const session = new Session(broker, { write: (bytes) => bytes.length, end() {}, remoteAddress: "test" });
      session.clientId = clientId;
      session.state = "open";
      broker.attach(session);
      return session;
    },
    subscribe(session, kind, queue, ids, prefetch) {
      const handler = subscribeHandler(broker.queue(queue), session, kind, ++sub, ids, prefetch ?? null);
      broker.flush();
      return handler;
    },
    ackAll(handler) {
      const queue = [...broker.queues.values()].find((q) => q.handlers().some((h) => h.sink === handler.sink && h.sub === handler.sub))!;
      const copies = [...handler.inflight.values()];
      for (const copy of copies) queue.ack(copy);
      broker.stats.counters.acked += copies.length; // the session counts acks in real life
      broker.flush();
    },
    async request(path, init) {
      const response = await app.request(path, init);
      const text = await response.text();
      let body: unknown = null;
      try {
        body = JSON.parse(text);
      } catch { /* not JSON (metrics, dashboard) */ }
      return { status: response.status, body, headers: response.headers, text };
    },
    async close() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Rewrites the fixture's config file (for reload tests). */
export function writeConfig(fixture: Fixture, input: Record<string, unknown>): void {
  writeFileSync(fixture.configPath, JSON.stringify(input));
}
