/**
 * Client options: defaults, host strings and validation. Mistakes in options are programmer
 * errors, reported with built-in errors (TypeError, RangeError) when `connect()` is called; a
 * client id the broker would refuse throws the broker's own KittenError, BAD_CLIENT_ID.
 */
import { parseHost, validateClientId } from "../protocol/mod.ts";

export { type Host, parseHost } from "../protocol/mod.ts";
import type { TlsOptions } from "./transport.ts";

export interface ClientOptions {
  /** Brokers, as `host:port@serviceId#token` (serviceId and token optional). */
  hosts: string[];
  /** The client's id. Listeners that share it share one copy of each message. */
  clientId: string;
  /** Folder of the client's key pair (used by key authentication). */
  keysDirectory: string;
  /** Key files are `<keysDirectory>/<keysName>.pem` and `.pub`. */
  keysName: string;
  /** Unconfirmed sends kept while brokers are away or refuse for now; past it, `send` fails with QUEUE_FULL. */
  maxPendingMessages: number;
  /**
   * How long a send may wait for its confirmation, from the call: through reconnects and refusals
   * that waiting fixes (NOT_ENOUGH_REPLICAS, STOPPING, no master), it is sent again until then;
   * after it, `send` fails with TIMEOUT, naming the last refusal.
   */
  sendTimeoutMs: number;
  /** First reconnect delay; it grows ×1.5 per failed attempt, with jitter. */
  reconnectDelayMs: number;
  /** Largest reconnect delay. */
  maxReconnectDelayMs: number;
  /** Largest frame accepted from a broker, in bytes (the broker's own limit applies to sends). */
  maxFrameSize: number;
  /** A host that has not completed the handshake by then is disconnected and retried. */
  handshakeTimeoutMs: number;
  /** TLS towards every host (null: plain TCP). */
  tls: TlsOptions | null;
}


export function defaultOptions(): ClientOptions {
  return {
    hosts: [],
    clientId: "myclient-id", // 0.12's default, so code that never set it keeps its id
    keysDirectory: "keys",
    keysName: "client",
    maxPendingMessages: 10_000, // the bound 0.12's README documents
    sendTimeoutMs: 60_000, // a failover (election, catch-up) takes seconds: a minute rides through it
    reconnectDelayMs: 100,
    maxReconnectDelayMs: 5_000,
    maxFrameSize: 64 * 1024 * 1024,
    handshakeTimeoutMs: 10_000, // twice the broker's default deadline: a slow key check still fits
    tls: null,
  };
}

/** Merges user options over the defaults and checks them. */
export function parseOptions(input: Partial<ClientOptions> | undefined): ClientOptions {
  if (input === null || typeof input !== "object") throw new TypeError("Cannot connect: config must be an object");
  const options = { ...defaultOptions(), ...stripUndefined(input) };
  if (!Array.isArray(options.hosts) || options.hosts.length === 0) {
    throw new TypeError(`Cannot connect: "hosts" must be a non-empty array of "host:port@serviceId#token" strings`);
  }
  options.hosts.forEach(parseHost);
  // The broker's rule (it names the pinned key file): a bad id fails here, not at every handshake.
  validateClientId(options.clientId);
  for (const key of ["keysDirectory", "keysName"] as const) {
    if (typeof options[key] !== "string" || options[key].length === 0) {
      throw new TypeError(`Cannot connect: "${key}" must be a non-empty string`);
    }
  }
  if (options.tls !== null && typeof options.tls !== "object") {
    throw new TypeError(`Cannot connect: "tls" must be an object ({ ca }) or null`);
  }
  for (const key of ["maxPendingMessages", "sendTimeoutMs", "reconnectDelayMs", "maxReconnectDelayMs", "maxFrameSize", "handshakeTimeoutMs"] as const) {
    const value = options[key];
    if (!Number.isSafeInteger(value) || value < 1) {
      throw new RangeError(`Cannot connect: "${key}" must be a positive integer: current value is ${value}`);
    }
  }
  return options;
}

function stripUndefined<T extends object>(input: T): Partial<T> {
  return Object.fromEntries(Object.entries(input).filter(([, value]) => value !== undefined)) as Partial<T>;
}

