/**
 * End-to-end helpers: an in-process broker on 127.0.0.1, port 0, with a memory logger (quiet, and
 * tests can assert on its lines), a connected client, and `waitFor`, which polls instead of sleeping.
 */
import {
  Client,
  type ClientOptions,
  type ConsumeHandler,
  type DeliveryInfo,
  type Done,
  type KittenError,
  type ListenHandler,
} from "../../mod.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { testKeysDirectory } from "./keys.ts";
export { freePort } from "./ports.ts";
import type { Broker } from "../../src/server/broker.ts";
import { parseConfig } from "../../src/server/config/config.ts";
import { type Logger, memoryLogger } from "../../src/server/log.ts";
import { startBroker } from "../../src/server/server.ts";

export interface TestBroker {
  readonly port: number;
  readonly broker: Broker;
  readonly logger: Logger & { lines: string[] };
  /** The client host string: `127.0.0.1:<port>@broker-1`. */
  readonly host: string;
  stop(): Promise<void>;
}

/** Starts a broker; `overrides` are config keys merged over the test defaults (deeply for socketServer). */
export function startTestBroker(overrides: Record<string, unknown> = {}): TestBroker {
  const socketServer = {
    port: 0,
    host: "127.0.0.1",
    ...(overrides.socketServer as Record<string, unknown> | undefined),
  };
  // Pinned client keys and the store go to a temp folder of this broker, removed when it stops.
  const root = mkdtempSync(join(tmpdir(), "kitten-broker-"));
  const config = parseConfig({
    isManagementInterface: false,
    registeredClientsPath: join(root, "clients"),
    dataDirectory: join(root, "data"),
    keysDirectory: join(root, "keys"), // the broker's own key pair, for its peer links
    ...overrides,
    socketServer,
  });
  const logger = memoryLogger();
  const server = startBroker(config, { logger });
  return {
    port: server.port,
    broker: server.broker,
    logger,
    host: `127.0.0.1:${server.port}@broker-1`,
    stop: async () => {
      await server.stop();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

let clientSeq = 0;

/** A clientId no other client of this test run has. */
export function uniqueClientId(): string {
  return `test-client-${process.pid}-${++clientSeq}`;
}

/** Reconnect settings for tests where a broker goes away and comes back: retries every 10-50 ms. */
export const fastReconnect = { reconnectDelayMs: 10, maxReconnectDelayMs: 50 };

/** Client options for `testBroker`: a unique clientId and a fast reconnect, then `options`. */
export function clientOptions(testBroker: { host: string }, options: Partial<ClientOptions> = {}): Partial<ClientOptions> {
  return {
    hosts: [testBroker.host],
    clientId: uniqueClientId(),
    keysDirectory: testKeysDirectory,
    reconnectDelayMs: 20,
    maxReconnectDelayMs: 100,
    ...options,
  };
}

/** A client connected to `testBroker`; `options` override the defaults of `clientOptions()`. */
export async function connectClient(testBroker: { host: string }, options: Partial<ClientOptions> = {}): Promise<Client> {
  const mq = new Client();
  await mq.connect(clientOptions(testBroker, options));
  return mq;
}

/** Resolves once `predicate()` is truthy, polling every 5 ms; throws after `timeoutMs`. */
export async function waitFor(
  predicate: () => unknown,
  timeoutMs = 2000,
  what = predicate.toString(),
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`waitFor timed out after ${timeoutMs} ms: ${what}`);
    await sleep(5);
  }
}

/**
 * Proves that nothing more is on its way to `got` from the queue of `channel`, without a clock:
 * sends a marker through `sender` and waits for it. A queue delivers in order, so whatever was
 * queued before the marker (a duplicate, a message that should not be there) has arrived by then.
 * The marker is taken out of `got` again. `got` must be filled by a consumer of `channel` that acks.
 */
export async function drain(sender: Client, channel: string, got: Received[], timeoutMs = 5000): Promise<void> {
  const marker = `drain-${process.pid}-${++clientSeq}`;
  const isMarker = (r: Received) => (r.message as { drain?: unknown } | null)?.drain === marker;
  await sender.send(channel, { drain: marker });
  await waitFor(() => got.some(isMarker), timeoutMs, `the marker sent to ${channel} arrived`);
  got.splice(got.findIndex(isMarker), 1);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}


/**
 * Tracks everything a test starts so `afterEach(cleanup.run)` stops it, even when the test fails.
 * Clients are disconnected before brokers are stopped.
 */
export class Cleanup {
  #clients: Client[] = [];
  #brokers: TestBroker[] = [];
  #others: (() => unknown)[] = [];

  broker(overrides: Record<string, unknown> = {}): TestBroker {
    const broker = startTestBroker(overrides);
    this.#brokers.push(broker);
    return broker;
  }

  add<T extends Client | TestBroker>(thing: T): T {
    if (thing instanceof Client) this.#clients.push(thing);
    else this.#brokers.push(thing);
    return thing;
  }

  defer(fn: () => unknown): void {
    this.#others.push(fn);
  }

  async client(testBroker: { host: string }, options: Partial<ClientOptions> = {}): Promise<Client> {
    const mq = new Client();
    this.#clients.push(mq); // tracked before connecting: a failed connect is cleaned up too
    await mq.connect(clientOptions(testBroker, options));
    return mq;
  }

  run = async (): Promise<void> => {
    const clients = this.#clients.splice(0);
    const brokers = this.#brokers.splice(0);
    const others = this.#others.splice(0);
    for (const fn of others) {
      try {
        await fn();
      } catch { /* best effort */ }
    }
    for (const mq of clients) await mq.disconnect().catch(() => {});
    for (const broker of brokers) await broker.stop().catch(() => {});
  };
}

/** One delivery as a test handler saw it. */
export interface Received {
  message: unknown;
  info: DeliveryInfo;
  done: Done;
  /** performance.now() at delivery. */
  at: number;
}

/**
 * A consume handler that records deliveries in `into`; with `ack: true` (the default) it calls
 * `done()` at once. Handler errors (refusals) go to `errors`.
 */
export function recorder(
  into: Received[],
  options: { ack?: boolean; errors?: unknown[] } = {},
): ConsumeHandler {
  const ack = options.ack ?? true;
  return (error, message, done, info) => {
    if (error) {
      options.errors?.push(error);
      return;
    }
    into.push({ message, info: info!, done, at: performance.now() });
    if (ack) done();
  };
}

/** A listen handler that records deliveries in `into`. */
export function listenRecorder(into: Received[], errors?: unknown[]): ListenHandler {
  return (error, message, info) => {
    if (error) {
      errors?.push(error);
      return;
    }
    into.push({ message, info: info!, done: () => {}, at: performance.now() });
  };
}

/** Awaits `promise` and returns the error it rejects with (fails when it resolves). */
export async function rejection(promise: Promise<unknown>): Promise<KittenError> {
  try {
    await promise;
  } catch (error) {
    return error as KittenError;
  }
  throw new Error("expected a rejection, the promise resolved");
}
