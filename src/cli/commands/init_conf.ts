/**
 * `kitten-mq init-conf [PATH] [--force]`: writes a config file holding every default
 * (`kitten-mq.config.json` by default). JSON has no comments, so the file documents its keys
 * in a top-level `"$comment"` array, which the broker accepts and ignores. An existing file is
 * never overwritten without `--force`.
 */
import { writeFile } from "node:fs/promises";
import { defaultConfig, RESTART_KEY_PATHS } from "../../server/mod.ts";
import type { CliArgs } from "../args.ts";
import { CliError } from "../api.ts";

export const DEFAULT_CONFIG_FILE = "kitten-mq.config.json";

const COMMENT = [
  "Kitten-MQ broker configuration. Every key is optional (this file lists the defaults); unknown keys are refused.",
  "Relative paths are resolved from this file's folder. Apply changes with `kitten-mq reload -c FILE` (or SIGUSR2);",
  `${RESTART_KEY_PATHS.join(", ")} are read at start only:`,
  "  a reload that changes one is refused (nothing applied).",
  "serviceId: this broker's id; clients write it after '@' in their host string (the audience of their tokens).",
  "isMaster: only the master delivers; slaves keep copies and take over after `isMaster: true` + reload.",
  "socketServer: the client port. host 127.0.0.1 keeps it local: set 0.0.0.0 to expose it. token: shared secret",
  "  clients add as '#token' to their host string (null: none). tls: {cert, key} PEM files. maxFrameSize (bytes),",
  "  maxConnections, handshakeTimeoutMs, maxUnauthenticatedBytes (partial handshake frames of all connections not yet",
  "  welcomed), maxOutgoingBytes (unsent bytes per connection: past it deliveries pause and it is not read),",
  "  slowConsumerGraceMs (how long it may stay past maxOutgoingBytes before it is closed with SLOW_CONSUMER).",
  "  logs, packetsFilename: 0.12's packet store, unused (accepted so 0.12 files load).",
  "maxItemsInQueue: messages waiting for a recipient per queue; the oldest is dropped first beyond it. null: 1000 for",
  "  a memory queue, no bound for a durable one (its messages wait on disk; minFreeDiskBytes bounds them).",
  "requeueLimit: deliveries of a message before it is dead (dead-lettered when channels[q].deadLetter is set).",
  "requeueInterval: seconds a delivery may stay unacked before it is redelivered.",
  "prefetch: unacked deliveries per consumer handler; listenerPrefetch: the same for listeners.",
  "maxMessagesPerQueue: live messages per queue; beyond it sends are refused with QUEUE_FULL. null: 1,000,000 for a",
  "  memory queue, no bound for a durable one.",
  "memoryBudgetBytes: bytes of a durable queue's messages kept in memory; the rest stay in the store and are read",
  "  back in order ahead of need (channels[q].memoryBudgetBytes overrides it).",
  "minFreeDiskBytes: sends to durable queues are refused with DISK_FULL while the data directory's disk has less free.",
  "logLevel: 1 debug, 2 info, 3 warn, 4 error. Logs go to stdout/stderr (journalctl -u kitten-mq); logsDirectory is unused.",
  "registeredClientsPath: pinned client public keys (`kitten-mq keys list|revoke`). keysDirectory, keysName: the",
  "  broker's own key pair, with which it authenticates to its peers (created on first use).",
  "dataDirectory: the durable store, and admin.json (where `kitten-mq status` & co find the admin API).",
  "durability: 'fsync' (a confirmed send is on disk), 'batch' (committed every commitIntervalMs ms, confirmed",
  "  before) or 'memory' (no store); channels[q].durability overrides it per queue.",
  "isManagementInterface: serve the admin API and dashboard on httpServerPort (0: a free port, see dataDirectory/admin.json).",
  "pollIntervalHTTP: dashboard refresh in milliseconds.",
  "admin: host of the admin API (127.0.0.1; any other host requires token), token (bearer token, null: none),",
  "  tls: {cert, key} PEM files, idleTimeoutSeconds: idle HTTP connections are closed after it.",
  "rules: [] lets every client read and write everything. Otherwise a client gets what the rules whose 'client'",
  "  (an id, or a prefix ending in '*') match it grant: {client, read: [patterns], write: [patterns]}, patterns",
  "  'endpoint/*', 'endpoint/version/*', 'endpoint/version/id'; '!' before a read pattern: first listener owns each id.",
  "channels: per-queue overrides, { 'endpoint/version': { prefetch, listenerPrefetch, ttl (seconds a waiting message",
  "  lives), maxItemsInQueue, memoryBudgetBytes, requeueLimit, requeueInterval, durability, deadLetter: 'endpoint/version',",
  "  map: {message format}, group: the group that owns it when first placed (with cluster.etcd) } }.",
  "cluster: several brokers. peers: the other brokers as 'host:port@serviceId'; a slave catches up from the master",
  "  over them. minInSyncReplicas: brokers (master included) holding a message before it is confirmed (2 with three",
  "  brokers: nothing confirmed is lost when the master dies). maxLagMs: an in-sync slave silent this long drops out.",
  "  etcd: null (promotion by isMaster + reload) or { endpoints: ['http://host:2379'], leaseTtlSeconds: 3 }: automatic failover.",
  "  group: the brokers electing one master among them ('default'); with etcd, queues spread over the groups of a",
  "  prefix. advertise: 'host:port' clients reach this broker at, written in the queue map (null: host and bound port).",
];

export async function run(args: CliArgs): Promise<number> {
  const path = args.positionals[0] ?? DEFAULT_CONFIG_FILE;
  const text = JSON.stringify({ $comment: COMMENT, ...defaultConfig() }, null, 2) + "\n";
  try {
    await writeFile(path, text, { flag: args.force ? "w" : "wx", mode: 0o600 });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EEXIST") throw new CliError("BAD_REQUEST", `"${path}" exists: pass --force to overwrite it`);
    throw new CliError("BAD_REQUEST", `cannot write "${path}": ${(error as Error).message}`);
  }
  if (args.json) console.log(JSON.stringify({ path, written: true, start: `kitten-mq start --config ${path}` }, null, 2));
  else console.log(`kitten-mq: wrote ${path}; start with: kitten-mq start --config ${path}`);
  return 0;
}
