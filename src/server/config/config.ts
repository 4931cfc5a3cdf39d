/**
 * Broker configuration: defaults, loading, and the checks between keys. The schema of the file is
 * in schema.ts, the wording of its problems in problems.ts.
 *
 * The file keeps kitten-mq 0.12's key names so its config files load unchanged. The input is
 * merged deeply over `defaultConfig()`: a section given with some keys keeps the defaults of the
 * others (a `socketServer` without `host` stays on loopback), then validated
 * completely: every problem is collected with its key path and reported in one `CONFIG_INVALID`
 * error, so an operator fixes a file in one pass instead of one error per restart.
 *
 * Reload parses a whole new `Config` and swaps it; a failed parse leaves the running one untouched.
 */
import { readFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import * as v from "valibot";
import { parseHost } from "../../protocol/host.ts";
import { isPlainObject, show } from "../internal/values.ts";
import { jsonErrorPosition } from "./json_position.ts";
import { compileSchemas } from "../schema/schema.ts";
import { configError, type ConfigProblem, isUnknownKey, toProblem, unknownKeyProblems } from "./problems.ts";
import { type Config, CONFIG_SCHEMA, isPeerAddress } from "./schema.ts";

// The types and the problem shape live with the schema and the reports; imported from here too.
export type { ChannelConfig, Config, Rule } from "./schema.ts";
export { CONFIG_SCHEMA } from "./schema.ts";
export type { ConfigProblem } from "./problems.ts";

/** The effective settings of one queue, after `channels[queue]` overrides the broker-level keys. */
export interface ChannelSettings {
  prefetch: number;
  listenerPrefetch: number;
  /** Seconds, or null when waiting messages never expire. */
  ttl: number | null;
  /** Messages waiting for a recipient; Infinity when only the disk bounds them (durable queues by default). */
  maxItemsInQueue: number;
  /** Live messages (in memory and paged to disk); Infinity when only the disk bounds them. */
  maxMessagesPerQueue: number;
  /** Durable queues: bytes of messages kept in memory; the rest stay in the store until needed. */
  memoryBudgetBytes: number;
  requeueLimit: number;
  requeueInterval: number;
  /** The queue (`endpoint/version`) that receives this queue's dead messages, or null. */
  deadLetter: string | null;
  /** When a send to this queue is confirmed: on disk (fsync), at once then committed (batch), never stored (memory). */
  durability: "fsync" | "batch" | "memory";
}

export function defaultConfig(): Config {
  return {
    serviceId: "broker-1", // 0.12's name; it is the JWT audience, so clients expect it
    isMaster: true, // a lone broker must deliver out of the box
    socketServer: {
      port: 1234, // 0.12's port: existing clients connect without changes
      host: "127.0.0.1", // safe by default: exposing the broker is an explicit decision
      token: null, // no shared secret unless the operator sets one; keys and pinning still apply
      maxFrameSize: 1048576, // 1 MiB bounds what one peer can make the broker allocate
      maxConnections: 10000, // one host cannot exhaust the broker's file descriptors
      handshakeTimeoutMs: 5000, // an unauthenticated connection holds resources for at most this long
      maxUnauthenticatedBytes: 8388608, // 8 MiB: what all connections not yet welcomed may hold together
      maxOutgoingBytes: 4194304, // a slow reader holds at most 4 MiB of unsent frames; its deliveries pause
      slowConsumerGraceMs: 10000, // unsent bytes over maxOutgoingBytes this long: SLOW_CONSUMER, closed (NATS's write deadline)
      tls: null, // plain TCP unless certificate and key files are given
      logs: "packets", // accepted so 0.12 files load; unused (bun:sqlite stores)
      packetsFilename: "broker.log", // compatibility only, unused for the same reason
    },
    // null: by durability. A memory queue keeps 1,000 waiting messages (0.12's bound; it protects RAM); a durable
    // queue has no count bound, as its messages wait on disk (minFreeDiskBytes bounds them).
    maxItemsInQueue: null as number | null,
    requeueLimit: 5, // a poison message dies instead of looping forever
    requeueInterval: 100, // ack timeout in seconds (0.12's value)
    prefetch: 1, // one unacked delivery per consumer handler: fair round-robin
    listenerPrefetch: 1000, // listeners are acked automatically, so a deep window costs little
    // null: by durability. A memory queue holds at most 1,000,000 (its memory); a durable queue
    // pages to disk beyond memoryBudgetBytes, so only minFreeDiskBytes bounds it.
    maxMessagesPerQueue: null as number | null,
    memoryBudgetBytes: 8388608, // 8 MiB of messages per durable queue in memory; the rest are read back from the store ahead of need
    minFreeDiskBytes: 268435456, // sends to durable queues are refused (DISK_FULL) while the data directory's disk has less free
    logLevel: 2, // info
    registeredClientsPath: "clients", // folder of pinned client keys (0.12's name)
    keysDirectory: "keys", // the broker's own key pair needs a folder: no empty default
    keysName: "broker", // 0.12's template value
    logsDirectory: "logs", // compatibility only: accepted and unused; logs go to stdout/stderr (journald under systemd)
    dataDirectory: "kitten-mq-data", // durable store folder, next to the config file
    durability: "fsync", // a confirmed send is on disk: survives kill -9 and power loss
    commitIntervalMs: 5, // batch mode: how often pending messages are committed
    isManagementInterface: true, // the admin API and statistics are served unless turned off
    httpServerPort: 8080, // 0.12's admin port: existing scrapes keep working
    pollIntervalHTTP: 5000, // dashboard refresh, in milliseconds
    admin: {
      host: "127.0.0.1", // loopback unless told otherwise: the admin API can stop and purge the broker
      token: null, // bearer token for the admin API; required when host is not loopback
      tls: null, // plain HTTP unless certificate and key files are given
      idleTimeoutSeconds: 10, // idle keep-alive connections are closed: they cannot pile up
    },
    rules: [], // no rules: every client may read and write everything (an exposed broker without token or rules is warned about)
    channels: {}, // every queue uses the broker-level settings
    cluster: {
      peers: [], // the other brokers' client addresses ("host:port@serviceId"); none: a lone broker
      minInSyncReplicas: 1, // brokers (the master included) holding a message before it is confirmed
      maxLagMs: 10000, // an in-sync slave that acknowledges nothing for this long drops out of sync
      etcd: null, // automatic failover: { endpoints, leaseTtlSeconds }; null: promotion by reload
      group: "default", // its own election in etcd beside other groups' (another name needs cluster.etcd)
      advertise: null, // the address the queue map gives clients; null: socketServer.host (or this machine's name) and the bound port
      moveBytesPerSecond: 10485760, // a queue move streams its snapshot at most this fast (10 MiB/s: 1,000,000 messages of 100 bytes in about 15 s)
    },
  };
}

/**
 * Top-level keys that are accepted and ignored: `isStopping`, which 0.12 wrote into its file, and
 * `$comment`, where `kitten-mq init-conf` documents every key (JSON has no comments).
 */
const COMPATIBILITY_KEYS = new Set(["isStopping", "$comment"]);

/** Parses and validates a config value (the JSON of a config file); `source` names it in errors. */
export function parseConfig(input: unknown, source = "config"): Config {
  if (!isPlainObject(input)) {
    throw configError(source, [{ path: "(root)", message: `must be an object: current value is ${show(input)}` }]);
  }
  const merged = mergeOverDefaults(input);
  const result = v.safeParse(CONFIG_SCHEMA, merged, { abortPipeEarly: true });
  // valibot reports the first unknown key of an object only: every one is listed by the walk.
  const problems = unknownKeyProblems(merged);
  for (const issue of result.issues ?? []) if (!isUnknownKey(issue)) problems.push(toProblem(issue));
  // An unknown key in an object the walk does not know of is still refused, with valibot's words.
  if (!result.success && problems.length === 0) problems.push(...result.issues.map(toProblem));
  problems.push(...crossFieldProblems(merged));
  // Channel formats are compiled here too, so a bad `map` is reported with its path at load,
  // together with every other problem of the file.
  if (isPlainObject(merged.channels)) problems.push(...compileSchemas(merged.channels as Record<string, { map?: unknown }>).problems);
  if (problems.length > 0) throw configError(source, problems);
  return result.output as Config; // no issues, so the output is typed
}

/** Reads a JSON config file; relative folders in it are resolved against the file's folder. */
export async function loadConfigFile(path: string): Promise<Config> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const message = code === "ENOENT" ? "file not found" : `cannot read file: ${(error as Error).message}`;
    throw configError(path, [{ path: "(file)", message }], error);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    const where = jsonErrorPosition(text);
    const at = where ? ` at line ${where.line}, column ${where.column} (found ${where.found})` : "";
    throw configError(path, [{ path: "(file)", message: `not valid JSON${at}: ${(error as Error).message}` }], error);
  }
  const config = parseConfig(json, path);
  // The broker is started by systemd or by hand from any folder: relative to the file, not the cwd.
  const base = dirname(resolve(path));
  config.registeredClientsPath = resolve(base, config.registeredClientsPath);
  config.logsDirectory = resolve(base, config.logsDirectory);
  config.keysDirectory = resolve(base, config.keysDirectory);
  config.dataDirectory = resolve(base, config.dataDirectory);
  const tls = config.socketServer.tls;
  if (tls) config.socketServer.tls = { cert: resolve(base, tls.cert), key: resolve(base, tls.key) };
  const adminTls = config.admin.tls;
  if (adminTls) config.admin.tls = { cert: resolve(base, adminTls.cert), key: resolve(base, adminTls.key) };
  return config;
}

/** The effective settings of `queue` (`endpoint/version`): its `channels` entry over the broker's. */
export function channelSettings(config: Config, queue: string): ChannelSettings {
  const channel = Object.hasOwn(config.channels, queue) ? config.channels[queue]! : {};
  const durability = channel.durability ?? config.durability;
  const memory = durability === "memory";
  return {
    prefetch: channel.prefetch ?? config.prefetch,
    listenerPrefetch: channel.listenerPrefetch ?? config.listenerPrefetch,
    ttl: channel.ttl ?? null,
    maxItemsInQueue: channel.maxItemsInQueue ?? config.maxItemsInQueue ?? (memory ? MEMORY_MAX_ITEMS : Infinity),
    maxMessagesPerQueue: config.maxMessagesPerQueue ?? (memory ? MEMORY_MAX_MESSAGES : Infinity),
    memoryBudgetBytes: channel.memoryBudgetBytes ?? config.memoryBudgetBytes,
    requeueLimit: channel.requeueLimit ?? config.requeueLimit,
    requeueInterval: channel.requeueInterval ?? config.requeueInterval,
    deadLetter: channel.deadLetter ?? null,
    durability,
  };
}

/** `maxItemsInQueue` of a memory queue when the config sets none: 0.12's bound, which protects a memory queue's RAM. */
export const MEMORY_MAX_ITEMS = 1000;
/** `maxMessagesPerQueue` of a memory queue when the config sets none: what bounds its memory. */
export const MEMORY_MAX_MESSAGES = 1_000_000;

/** Where the config asks for a durable mode ("fsync" or "batch"), broker-wide or per channel; null if nowhere. */
export function durableKey(config: Config): string | null {
  if (config.durability !== "memory") return "durability";
  for (const [queue, channel] of Object.entries(config.channels)) {
    if (channel.durability !== undefined && channel.durability !== "memory") return `channels["${queue}"].durability`;
  }
  return null;
}

/** True for hosts only this machine can reach: `localhost`, `127.x.x.x`, `::1`. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
  return bare === "localhost" || bare === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(bare);
}

/**
 * What makes this config unsafe to run as it is, in words for the log and `GET /status`: today,
 * a client port other machines can reach with neither a broker token nor rules, so anyone who
 * reaches it may read and write every channel.
 */
export function securityWarnings(config: Config): string[] {
  const { host, token } = config.socketServer;
  if (isLoopbackHost(host) || token !== null || config.rules.length > 0) return [];
  return [
    `socketServer.host ${JSON.stringify(host)} is reachable from other machines, and with no socketServer.token and no rules ` +
    `any client that reaches it may read and write every channel: set a token, rules, or a loopback host`,
  ];
}

/** Deep merge over the defaults: `socketServer` and `admin` key by key; lists and `channels` are replaced whole. */
function mergeOverDefaults(input: Record<string, unknown>): Record<string, unknown> {
  const defaults = defaultConfig();
  // Null prototype: a `__proto__` key in the JSON stays a plain (unknown) key, never a prototype.
  const merged: Record<string, unknown> = Object.assign(Object.create(null), defaults);
  for (const [key, value] of Object.entries(input)) {
    if (value === undefined || COMPATIBILITY_KEYS.has(key)) continue;
    const section = key === "socketServer" || key === "admin" || key === "cluster" ? defaults[key] : null;
    merged[key] = section && isPlainObject(value)
      ? { ...section, ...Object.fromEntries(Object.entries(value).filter(([, x]) => x !== undefined)) }
      : value;
  }
  return merged;
}

/** Checks between keys; each runs only when the keys it reads are themselves valid. */
function crossFieldProblems(config: Record<string, unknown>): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const port = isPlainObject(config.socketServer) ? config.socketServer.port : undefined;
  const validPort = typeof port === "number" && Number.isInteger(port) && port > 0 && port <= 65535;
  if (config.isManagementInterface === true && validPort && port === config.httpServerPort) {
    problems.push({
      path: "socketServer.port",
      message: `must differ from httpServerPort while isManagementInterface is true: both are ${port}`,
    });
  }
  const admin = config.admin;
  // An admin API reachable from other machines without a token would let anyone purge queues.
  if (config.isManagementInterface === true && isPlainObject(admin) && typeof admin.host === "string" &&
    !isLoopbackHost(admin.host) && (admin.token === null || admin.token === undefined)) {
    problems.push({
      path: "admin.token",
      message: `is required when admin.host is not a loopback address: admin.host is ${JSON.stringify(admin.host)}`,
    });
  }
  const cluster = config.cluster;
  if (isPlainObject(cluster) && Array.isArray(cluster.peers) && typeof cluster.minInSyncReplicas === "number" &&
    cluster.minInSyncReplicas > cluster.peers.length + 1) {
    problems.push({
      path: "cluster.minInSyncReplicas",
      message: `must be at most the number of brokers (cluster.peers plus this one, ${cluster.peers.length + 1}): ` +
        `current value is ${cluster.minInSyncReplicas}`,
    });
  }
  if (isPlainObject(cluster) && Array.isArray(cluster.peers) && typeof config.serviceId === "string") {
    cluster.peers.forEach((peer, index) => {
      if (isPeerAddress(peer) && parseHost(peer).serviceId === config.serviceId) {
        problems.push({ path: `cluster.peers[${index}]`, message: `names this broker's own serviceId "${config.serviceId}"` });
      }
    });
  }
  // A group is the set of brokers that elect a master through etcd: without etcd there is one.
  if (isPlainObject(cluster) && cluster.etcd === null && typeof cluster.group === "string" && cluster.group !== "default") {
    problems.push({
      path: "cluster.group",
      message: `needs cluster.etcd: a group elects its master through etcd (current value is ${JSON.stringify(cluster.group)})`,
    });
  }
  const channels = config.channels;
  if (isPlainObject(channels)) {
    for (const [queue, channel] of Object.entries(channels)) {
      // Without etcd there is one group and no map to place a queue with.
      if (isPlainObject(channel) && channel.group !== undefined && isPlainObject(cluster) && cluster.etcd === null) {
        problems.push({
          path: `channels[${JSON.stringify(queue)}].group`,
          message: `needs cluster.etcd: queues are placed on groups through the queue map in etcd (current value is ${JSON.stringify(channel.group)})`,
        });
      }
      // Dead-lettering a queue into itself would recycle dead messages forever.
      if (isPlainObject(channel) && channel.deadLetter === queue) {
        problems.push({
          path: `channels[${JSON.stringify(queue)}].deadLetter`,
          message: `must differ from the channel key ${JSON.stringify(queue)}`,
        });
      }
    }
  }
  return problems;
}
