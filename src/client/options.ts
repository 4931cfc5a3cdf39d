/**
 * Client options: defaults, host strings and validation. Mistakes in options are programmer
 * errors, reported with built-in errors (TypeError, RangeError) when `connect()` is called; a
 * client id the broker would refuse throws the broker's own KittenError, BAD_CLIENT_ID.
 */
import { validateClientId } from "../protocol/mod.ts";
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
  /** Unconfirmed sends kept while brokers are away; past it, `send` fails with QUEUE_FULL. */
  maxPendingMessages: number;
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

export interface Host {
  host: string;
  port: number;
  serviceId: string | null;
  token: string | null;
  /** The host string as given, for messages. */
  label: string;
}

export function defaultOptions(): ClientOptions {
  return {
    hosts: [],
    clientId: "myclient-id", // the original's default
    keysDirectory: "keys",
    keysName: "client",
    maxPendingMessages: 10_000, // the bound the original README promised
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
  for (const key of ["maxPendingMessages", "reconnectDelayMs", "maxReconnectDelayMs", "maxFrameSize", "handshakeTimeoutMs"] as const) {
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

/** Parses `host:port@serviceId#token`; `[::1]:1234` for IPv6. */
export function parseHost(label: string): Host {
  if (typeof label !== "string") throw new TypeError(`Cannot connect: host must be a string: current value is ${label}`);
  const at = label.indexOf("@");
  const address = at < 0 ? label : label.slice(0, at);
  const rest = at < 0 ? "" : label.slice(at + 1);
  const hash = rest.indexOf("#");
  const serviceId = (hash < 0 ? rest : rest.slice(0, hash)) || null;
  const token = hash < 0 ? null : rest.slice(hash + 1) || null;
  const match = /^(?:\[([^\]]+)\]|([^:\[\]]+)):(\d{1,5})$/.exec(address);
  const port = match ? Number(match[3]) : NaN;
  if (!match || port < 1 || port > 65535) {
    throw new RangeError(`Cannot connect: host "${label}" must look like "host:port@serviceId#token" with port 1..65535`);
  }
  return { host: match[1] ?? match[2]!, port, serviceId, token, label };
}
