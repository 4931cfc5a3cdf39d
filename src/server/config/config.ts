/**
 * Broker configuration: defaults, parsing and validation of `kitten-mq.config.json`.
 *
 * The file keeps the original product's key names so existing config files load unchanged. The
 * input is merged deeply over `defaultConfig()` (the original merged shallowly, so a
 * `socketServer` object without `host` made the broker listen on every interface), then validated
 * completely: every problem is collected with its key path and reported in one `CONFIG_INVALID`
 * error, so an operator fixes a file in one pass instead of one error per restart.
 *
 * Reload parses a whole new `Config` and swaps it; a failed parse leaves the running one untouched.
 */
import { readFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import * as v from "valibot";
import { KittenError } from "../../protocol/errors.ts";
import { parseHost } from "../../protocol/host.ts";
import { jsonErrorPosition } from "./json_position.ts";
import { compileSchemas } from "../schema/schema.ts";

/** The fully resolved configuration: every key is present (types follow the schemas below). */
export type Config = v.InferOutput<typeof CONFIG_SCHEMA>;
/** Per-queue (`endpoint/version`) overrides of the broker-level settings. */
export type ChannelConfig = v.InferOutput<typeof CHANNEL_SCHEMA>;
/** One access rule: which channels a client (exact id, or prefix ending in `*`) may read and write. */
export type Rule = v.InferOutput<typeof RULE_SCHEMA>;

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

/** One config problem; `path` is written like `channels["invoice/v1"].prefetch`. */
export interface ConfigProblem {
  path: string;
  message: string;
}

export function defaultConfig(): Config {
  return {
    serviceId: "broker-1", // the original's name; it is the JWT audience, so clients expect it
    isMaster: true, // a lone broker must deliver out of the box (the original defaulted to a silent false)
    socketServer: {
      port: 1234, // the original's port: existing clients connect without changes
      host: "127.0.0.1", // safe by default: exposing the broker is an explicit decision
      token: null, // no shared secret unless the operator sets one; keys and pinning still apply
      maxFrameSize: 1048576, // 1 MiB bounds what one peer can make the broker allocate
      maxConnections: 10000, // one host cannot exhaust the broker's file descriptors
      handshakeTimeoutMs: 5000, // an unauthenticated connection holds resources for at most this long
      maxUnauthenticatedBytes: 8388608, // 8 MiB: what all connections not yet welcomed may hold together
      maxOutgoingBytes: 4194304, // a slow reader holds at most 4 MiB of unsent frames; its deliveries pause
      slowConsumerGraceMs: 10000, // unsent bytes over maxOutgoingBytes this long: SLOW_CONSUMER, closed (NATS's write deadline)
      tls: null, // plain TCP unless certificate and key files are given
      logs: "packets", // compatibility only: the original's packet-store folder, unused (bun:sqlite stores)
      packetsFilename: "broker.log", // compatibility only, unused for the same reason
    },
    // null: by durability. A memory queue keeps the original's 1,000 waiting messages; a durable
    // queue has no count bound, as its messages wait on disk (minFreeDiskBytes bounds them).
    maxItemsInQueue: null as number | null,
    requeueLimit: 5, // the original's delivery limit: a poison message dies instead of looping forever
    requeueInterval: 100, // the original's ack timeout in seconds
    prefetch: 1, // one unacked delivery per consumer handler: fair round-robin, as the original
    listenerPrefetch: 1000, // listeners are acked automatically, so a deep window costs little
    // null: by durability. A memory queue holds at most 1,000,000 (its memory); a durable queue
    // pages to disk beyond memoryBudgetBytes, so only minFreeDiskBytes bounds it.
    maxMessagesPerQueue: null as number | null,
    memoryBudgetBytes: 8388608, // 8 MiB of messages per durable queue in memory; the rest are read back from the store ahead of need
    minFreeDiskBytes: 268435456, // sends to durable queues are refused (DISK_FULL) while the data directory's disk has less free
    logLevel: 2, // info, as the original
    registeredClientsPath: "clients", // the original's folder of pinned client keys
    keysDirectory: "keys", // the original's template value; its empty default crashed the broker
    keysName: "broker", // the original's template value
    logsDirectory: "logs", // compatibility only: accepted and unused; logs go to stdout/stderr (journald under systemd)
    dataDirectory: "kitten-mq-data", // durable store folder, next to the config file
    durability: "fsync", // a confirmed send is on disk: survives kill -9 and power loss
    commitIntervalMs: 5, // batch mode: how often pending messages are committed
    isManagementInterface: true, // the original serves statistics unless told not to
    httpServerPort: 8080, // the original's admin port
    pollIntervalHTTP: 5000, // the original's dashboard refresh, in milliseconds
    admin: {
      host: "127.0.0.1", // the original listened on every interface with no auth: loopback unless told otherwise
      token: null, // bearer token for the admin API; required when host is not loopback
      tls: null, // plain HTTP unless certificate and key files are given
      idleTimeoutSeconds: 10, // idle keep-alive connections are closed: they cannot pile up
    },
    rules: [], // no rules: every client may read and write everything, as the original
    channels: {}, // every queue uses the broker-level settings
    cluster: {
      peers: [], // the other brokers' client addresses ("host:port@serviceId"); none: a lone broker
      minInSyncReplicas: 1, // brokers (the master included) holding a message before it is confirmed
      maxLagMs: 10000, // an in-sync slave that acknowledges nothing for this long drops out of sync
      etcd: null, // automatic failover: { endpoints, leaseTtlSeconds }; null: promotion by reload
    },
  };
}

/**
 * Top-level keys that are accepted and ignored: the original's internal soft-stop state, and
 * `$comment`, where `kitten-mq init-conf` documents every key (JSON has no comments).
 */
const COMPATIBILITY_KEYS = new Set(["isStopping", "$comment"]);

const ENDPOINT = "[A-Za-z0-9_-]+";
const VERSION = "[A-Za-z0-9._-]+";
/** An id is URL-encoded, so it never contains a raw `/` or `*` (a lone `*` means every id). */
const ID = "[^/*\\s]+";
const QUEUE_RE = new RegExp(`^${ENDPOINT}/${VERSION}$`);
const PATTERN_RE = new RegExp(`^!?${ENDPOINT}/(?:\\*|${VERSION}/(?:\\*|${ID}))$`);

/** A peer is named by its serviceId: the address must carry one (`host:port@serviceId`). */
function isPeerAddress(value: unknown): value is string {
  if (typeof value !== "string") return false;
  try {
    const host = parseHost(value);
    return host.serviceId !== null && /^[A-Za-z0-9._-]{1,128}$/.test(host.serviceId);
  } catch {
    return false;
  }
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

// valibot's object schemas accept arrays, so every object is checked to be a plain one first.
const object = <S extends v.GenericSchema>(schema: S) =>
  v.pipe(v.custom<unknown>(isPlainObject, "must be an object"), schema);

const int = (min: number, max = Number.MAX_SAFE_INTEGER) => {
  const message = max === Number.MAX_SAFE_INTEGER
    ? `must be an integer >= ${min}`
    : `must be an integer from ${min} to ${max}`;
  return v.pipe(v.number(message), v.integer(message), v.minValue(min, message), v.maxValue(max, message));
};
const positiveSeconds = () =>
  v.pipe(
    v.number("must be a number of seconds > 0"),
    v.finite("must be a number of seconds > 0"),
    v.gtValue(0, "must be a number of seconds > 0"),
  );
const bool = () => v.boolean("must be true or false");
const durability = () => v.picklist(["fsync", "batch", "memory"], `must be "fsync", "batch" or "memory"`);
const str = () => v.string("must be a string");
const nonEmpty = () => v.pipe(v.string("must be a non-empty string"), v.minLength(1, "must be a non-empty string"));
const queueName = () =>
  v.pipe(str(), v.regex(QUEUE_RE, `must be "endpoint/version" (letters, digits, "-", "_"; version also ".")`));

const pattern = v.pipe(
  str(),
  v.check((p) => !/^!?\*(\/|$)/.test(p), `endpoint cannot be "*": a rule over every endpoint is refused`),
  v.regex(
    PATTERN_RE,
    `must match "endpoint/*", "endpoint/version/*" or "endpoint/version/id", optionally prefixed with "!"`,
  ),
);

const SOCKET_ENTRIES = {
  port: int(0, 65535),
  host: nonEmpty(),
  token: v.nullable(v.pipe(v.string("must be a string or null"), v.minLength(1, "must be a non-empty string or null"))),
  maxFrameSize: int(1024, 67108864),
  maxConnections: int(1, 1000000),
  handshakeTimeoutMs: int(100, 600000),
  maxUnauthenticatedBytes: int(65536, 1073741824),
  maxOutgoingBytes: int(65536, 1073741824),
  slowConsumerGraceMs: int(100, 3600000),
  // TLS on the client port: PEM file paths (relative to the config file).
  tls: v.nullable(object(v.strictObject({ cert: nonEmpty(), key: nonEmpty() }))),
  logs: str(),
  packetsFilename: str(),
};
const ADMIN_ENTRIES = {
  host: nonEmpty(),
  token: v.nullable(v.pipe(v.string("must be a string or null"), v.minLength(1, "must be a non-empty string or null"))),
  // TLS on the admin port: PEM file paths (relative to the config file).
  tls: v.nullable(object(v.strictObject({ cert: nonEmpty(), key: nonEmpty() }))),
  // Bun.serve's idleTimeout is at most 255 seconds.
  idleTimeoutSeconds: int(1, 255),
};
const RULE_ENTRIES = {
  // An exact client id, or a prefix ending in `*` (`easilys-*`).
  client: nonEmpty(),
  read: v.optional(v.array(pattern, "must be an array of patterns")),
  write: v.optional(v.array(pattern, "must be an array of patterns")),
};
const CHANNEL_ENTRIES = {
  prefetch: v.optional(int(1, 65535)),
  listenerPrefetch: v.optional(int(1, 65535)),
  // Seconds a waiting message may wait for a recipient; no ttl by default.
  ttl: v.optional(positiveSeconds()),
  maxItemsInQueue: v.optional(int(1)),
  // Bytes of this durable queue's messages kept in memory.
  memoryBudgetBytes: v.optional(int(1024)),
  requeueLimit: v.optional(int(1)),
  requeueInterval: v.optional(positiveSeconds()),
  // The message format; the schema module owns that language and validates it.
  map: v.optional(v.unknown()),
  // The `endpoint/version` that receives this queue's dead messages.
  deadLetter: v.optional(queueName()),
  // Overrides the broker's durability for this queue.
  durability: v.optional(durability()),
};
const ETCD_ENTRIES = {
  endpoints: v.pipe(
    v.array(v.pipe(str(), v.regex(/^https?:\/\/[^\s/]+$/, `must be a URL like "http://127.0.0.1:2379"`)), "must be an array of URLs"),
    v.minLength(1, "must list at least one etcd endpoint"),
  ),
  leaseTtlSeconds: v.optional(int(2, 600), 3),
  // Brokers that share a prefix elect one master among them.
  prefix: v.optional(v.pipe(str(), v.regex(/^[A-Za-z0-9._\/-]{1,200}$/, "must be 1 to 200 of letters, digits, \".\", \"_\", \"-\", \"/\"")), "kitten-mq/"),
};
const CLUSTER_ENTRIES = {
  peers: v.array(
    v.pipe(str(), v.check((peer: string) => isPeerAddress(peer), `must look like "host:port@serviceId" (the serviceId names the peer)`)),
    "must be an array of peer addresses",
  ),
  minInSyncReplicas: int(1, 16),
  maxLagMs: int(100, 600000),
  etcd: v.nullable(object(v.strictObject(ETCD_ENTRIES))),
};
const RULE_SCHEMA = object(v.strictObject(RULE_ENTRIES));
const CHANNEL_SCHEMA = object(v.strictObject(CHANNEL_ENTRIES));
const CONFIG_ENTRIES = {
  serviceId: v.pipe(str(), v.regex(/^[A-Za-z0-9._-]{1,128}$/, `must be 1 to 128 of letters, digits, ".", "_", "-"`)),
  isMaster: bool(),
  socketServer: object(v.strictObject(SOCKET_ENTRIES)),
  maxItemsInQueue: v.nullable(int(1)),
  requeueLimit: int(1),
  requeueInterval: positiveSeconds(),
  prefetch: int(1, 65535),
  listenerPrefetch: int(1, 65535),
  maxMessagesPerQueue: v.nullable(int(1)),
  memoryBudgetBytes: int(1024),
  minFreeDiskBytes: int(0),
  logLevel: int(1, 4),
  registeredClientsPath: str(),
  keysDirectory: str(),
  keysName: str(),
  logsDirectory: str(),
  dataDirectory: str(),
  durability: durability(),
  commitIntervalMs: int(1, 10000),
  isManagementInterface: bool(),
  httpServerPort: int(0, 65535),
  pollIntervalHTTP: int(100),
  admin: object(v.strictObject(ADMIN_ENTRIES)),
  rules: v.array(RULE_SCHEMA, "must be an array of rules"),
  channels: object(v.record(queueName(), CHANNEL_SCHEMA)),
  cluster: object(v.strictObject(CLUSTER_ENTRIES)),
};
export const CONFIG_SCHEMA = v.strictObject(CONFIG_ENTRIES);

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

/** `maxItemsInQueue` of a memory queue when the config sets none: the original's bound. */
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
  const channels = config.channels;
  if (isPlainObject(channels)) {
    for (const [queue, channel] of Object.entries(channels)) {
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

function isUnknownKey(issue: v.BaseIssue<unknown>): boolean {
  return issue.type === "strict_object" && issue.expected === "never" && issue.path?.at(-1)?.origin === "key";
}

function toProblem(issue: v.BaseIssue<unknown>): ConfigProblem {
  const items = issue.path ?? [];
  const path = formatPath(items.map((item) => item.key));
  if (issue.type === "strict_object" && items.at(-1)?.origin === "key") return { path, message: "is required" };
  return { path, message: `${issue.message}: current value is ${show(issue.input)}` };
}

const TLS_ENTRIES = { cert: null, key: null };

/** Every key the schema does not know, in every object of the file, each with a "did you mean" hint. */
function unknownKeyProblems(config: Record<string, unknown>): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const visit = (value: unknown, entries: Record<string, unknown>, keys: unknown[]) => {
    if (!isPlainObject(value)) return;
    for (const key of Object.keys(value)) {
      if (Object.hasOwn(entries, key)) continue;
      const typo = key.toLowerCase();
      // One edit for short keys, two for long ones: close enough to be a typo, not another word.
      const guess = Object.keys(entries).find((known) => editDistance(known.toLowerCase(), typo) <= (typo.length >= 4 ? 2 : 1));
      problems.push({ path: formatPath([...keys, key]), message: guess ? `unknown key (did you mean "${guess}"?)` : "unknown key" });
    }
  };
  visit(config, CONFIG_ENTRIES, []);
  if (isPlainObject(config.cluster)) {
    visit(config.cluster, CLUSTER_ENTRIES, ["cluster"]);
    visit(config.cluster.etcd, ETCD_ENTRIES, ["cluster", "etcd"]);
  }
  for (const section of ["socketServer", "admin"] as const) {
    const value = config[section];
    visit(value, section === "admin" ? ADMIN_ENTRIES : SOCKET_ENTRIES, [section]);
    if (isPlainObject(value)) visit(value.tls, TLS_ENTRIES, [section, "tls"]);
  }
  if (Array.isArray(config.rules)) config.rules.forEach((rule, index) => visit(rule, RULE_ENTRIES, ["rules", index]));
  if (isPlainObject(config.channels)) {
    for (const [queue, channel] of Object.entries(config.channels)) visit(channel, CHANNEL_ENTRIES, ["channels", queue]);
  }
  return problems;
}

/** `socketServer.port`, `rules[2].read[0]`; channel keys always as `channels["invoice/v1"]`. */
function formatPath(keys: unknown[]): string {
  if (keys.length === 0) return "(root)";
  let out = "";
  keys.forEach((key, index) => {
    if (typeof key === "number") out += `[${key}]`;
    else if (index === 1 && keys[0] === "channels") out += `[${JSON.stringify(key)}]`;
    else if (/^[A-Za-z_$][\w$]*$/.test(String(key))) out += index === 0 ? String(key) : `.${String(key)}`;
    else out += `[${JSON.stringify(String(key))}]`;
  });
  return out;
}

function show(value: unknown): string {
  if (value === undefined) return "undefined";
  if (typeof value === "number" && !Number.isFinite(value)) return String(value);
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value); // bigint or a cycle: parseConfig() also takes values that are not JSON
  }
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/** Levenshtein distance, small and only run on unknown keys, for the "did you mean" hint. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}

function configError(source: string, problems: ConfigProblem[], cause?: unknown): KittenError {
  const count = `${problems.length} problem${problems.length === 1 ? "" : "s"}`;
  const list = problems.map((problem) => `${problem.path}: ${problem.message}`).join("; ");
  const message = `Cannot load config "${source}": ${count}: ${list}`;
  return new KittenError("CONFIG_INVALID", message, problems, cause === undefined ? undefined : { cause });
}
