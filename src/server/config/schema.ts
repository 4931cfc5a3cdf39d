/**
 * The shape of `kitten-mq.config.json`: one valibot schema per section, and the types they give.
 * Every key, its type and its range is stated here once; config.ts merges a file over the
 * defaults and validates it with these, problems.ts words what they refuse.
 */
import * as v from "valibot";
import { parsePattern, queueProblem } from "../../protocol/channel.ts";
import { isValidClientId } from "../../protocol/client_id.ts";
import { parseHost } from "../../protocol/host.ts";
import { isPlainObject } from "../internal/values.ts";

/** The fully resolved configuration: every key is present (types follow the schemas below). */
export type Config = v.InferOutput<typeof CONFIG_SCHEMA>;
/** Per-queue (`endpoint/version`) overrides of the broker-level settings. */
export type ChannelConfig = v.InferOutput<typeof CHANNEL_SCHEMA>;
/** One access rule: which channels a client (exact id, or prefix ending in `*`) may read and write. */
export type Rule = v.InferOutput<typeof RULE_SCHEMA>;


/** A peer is named by its serviceId: the address must carry one (`host:port@serviceId`). */
export function isPeerAddress(value: unknown): value is string {
  if (typeof value !== "string") return false;
  try {
    const host = parseHost(value);
    return isValidClientId(host.serviceId);
  } catch {
    return false;
  }
}

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
/** A group name: an etcd key segment, so no "/". */
const groupName = () =>
  v.pipe(str(), v.regex(/^[A-Za-z0-9._-]{1,64}$/, `must be 1 to 64 of letters, digits, ".", "_", "-"`));
// Queue names and rule patterns follow the channel grammar of the protocol, limits included.
const queueName = () =>
  v.pipe(str(), v.check((name) => queueProblem(name) === null, (issue) => queueProblem(issue.input as string)!));
const pattern = v.pipe(
  str(),
  v.check((text) => typeof parsePattern(text) !== "string", (issue) => parsePattern(issue.input as string) as string),
);

export const SOCKET_ENTRIES = {
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
export const ADMIN_ENTRIES = {
  host: nonEmpty(),
  token: v.nullable(v.pipe(v.string("must be a string or null"), v.minLength(1, "must be a non-empty string or null"))),
  // TLS on the admin port: PEM file paths (relative to the config file).
  tls: v.nullable(object(v.strictObject({ cert: nonEmpty(), key: nonEmpty() }))),
  // Bun.serve's idleTimeout is at most 255 seconds.
  idleTimeoutSeconds: int(1, 255),
};
export const RULE_ENTRIES = {
  // An exact client id, or a prefix ending in `*` (`easilys-*`).
  client: nonEmpty(),
  read: v.optional(v.array(pattern, "must be an array of patterns")),
  write: v.optional(v.array(pattern, "must be an array of patterns")),
};
export const CHANNEL_ENTRIES = {
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
  // The group of brokers that owns this queue when it is first placed (with cluster.etcd).
  group: v.optional(groupName()),
  // The `endpoint/version` that receives this queue's dead messages.
  deadLetter: v.optional(queueName()),
  // Overrides the broker's durability for this queue.
  durability: v.optional(durability()),
};
export const ETCD_ENTRIES = {
  endpoints: v.pipe(
    v.array(v.pipe(str(), v.regex(/^https?:\/\/[^\s/]+$/, `must be a URL like "http://127.0.0.1:2379"`)), "must be an array of URLs"),
    v.minLength(1, "must list at least one etcd endpoint"),
  ),
  leaseTtlSeconds: v.optional(int(2, 600), 3),
  // Brokers that share a prefix elect one master among them.
  prefix: v.optional(v.pipe(str(), v.regex(/^[A-Za-z0-9._\/-]{1,200}$/, "must be 1 to 200 of letters, digits, \".\", \"_\", \"-\", \"/\"")), "kitten-mq/"),
};
export const CLUSTER_ENTRIES = {
  peers: v.array(
    v.pipe(str(), v.check((peer: string) => isPeerAddress(peer), `must look like "host:port@serviceId" (the serviceId names the peer)`)),
    "must be an array of peer addresses",
  ),
  minInSyncReplicas: int(1, 16),
  maxLagMs: int(100, 600000),
  etcd: v.nullable(object(v.strictObject(ETCD_ENTRIES))),
  // The group of brokers this one belongs to: one master, its slaves, its own election under
  // <prefix>groups/<group>/ in etcd, beside the other groups sharing cluster.etcd.
  group: groupName(),
  // Where clients reach this broker ("host:port"), as written in the queue map; null: the
  // client port's host (this machine's name when it listens on every address) and bound port.
  advertise: v.nullable(v.pipe(str(), v.regex(/^[^\s:@#\/]+:\d{1,5}$|^\[[0-9A-Fa-f:.]+\]:\d{1,5}$/, `must look like "host:port" or null`))),
  // How fast a queue move streams its snapshot out of this broker at most (the live queue is not
  // held back): what a move leaves of the disk and CPU to the other queues.
  moveBytesPerSecond: int(65536),
};
const RULE_SCHEMA = object(v.strictObject(RULE_ENTRIES));
const CHANNEL_SCHEMA = object(v.strictObject(CHANNEL_ENTRIES));
export const CONFIG_ENTRIES = {
  // A broker presents its serviceId as its client id to its peers: the same rule.
  serviceId: v.pipe(str(), v.check((id) => isValidClientId(id), `must be 1 to 128 of letters, digits, ".", "_", "-", not starting with "."`)),
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
