/**
 * What every bench worker shares: its options (JSON from the parent), the line protocol it
 * speaks on stdout, and its connection to the broker(s) through the real client, so client CPU
 * is paid as in real life. Runs on Bun and on Node (`npm run bench` scenario a-node bundles the
 * workers with the npm package's client): no `Bun` global here, and the client is imported
 * through its mod.ts, which that bundle replaces.
 */
import { client } from "../../client/mod.ts";

export interface WorkerOptions {
  /** One broker (`host:port@serviceId#token`)… */
  host?: string;
  /** …or several (a master and its slaves): the client connects to all of them. */
  hosts?: string[];
  keysDirectory: string;
  /** The channel to send to or receive from… */
  channel?: string;
  /**
   * …or several (the scale-out scenario: its queues spread over groups): a sender sends message
   * `seq` to `channels[seq % n]`, a receiver consumes or listens to every one.
   */
  channels?: string[];
  clientId: string;
  /** Receivers: unique messages expected. Publisher: messages to send. */
  count: number;
  /** Receivers: messages with `seq < skip` are warm-up, left out of the rate and latency figures. */
  skip?: number;
  /** Publisher: sends with `seq < warmup` are warm-up; it reports when it sent the first after them. */
  warmup?: number;
  prefetch?: number;
  window?: number;
  rate?: number;
  seconds?: number;
  warmupSeconds?: number;
  /** Senders: bodies are `{seq, t, pad}` with a pad of this many characters (default: payload()). */
  pad?: number;
}

/** The lines a worker writes on stdout, one each: `kind` or `kind <json>`. */
export type LineKind = "ready" | "result" | "partial" | "error";

export interface WorkerIo {
  emit(kind: LineKind, data?: unknown): void;
  /** One line on stderr (a client error seen on the way). */
  warn(line: string): void;
  /** Set by a role: what it has done so far, for the `partial` line it prints when it is stopped (SIGTERM). */
  partial: (() => unknown) | null;
}

/**
 * What the workers use of a client: the Kitten-MQ client is one; the peer comparison puts NATS
 * JetStream and Redis Streams behind the same calls (scripts/bench/jetstream_client.ts,
 * redis_client.ts), so a peer is measured by the same worker code.
 */
export interface BenchClient {
  send(channel: string, body: unknown): Promise<unknown>;
  consume(
    channel: string,
    handler: (error: { code: string; message: string } | null, message: unknown, ack: () => void) => void,
    options: { prefetch: number },
  ): BenchSubscription;
  listen(
    channel: string,
    handler: (error: { code: string; message: string } | null, message: unknown) => void,
  ): BenchSubscription;
  disconnect(): Promise<unknown>;
}

export interface BenchSubscription {
  ready: Promise<unknown>;
  /** The prefetch the server granted, once ready (Kitten-MQ says it; a peer's client may not). */
  readonly prefetch?: number | null;
}

/** Opens a worker's client: `connect` below for Kitten-MQ. */
export type Connector = (options: WorkerOptions, io: WorkerIo) => Promise<BenchClient>;

/** The channels a worker uses: `channels`, or the one `channel`. */
export function channelsOf(options: WorkerOptions): string[] {
  const channels = options.channels ?? (options.channel === undefined ? [] : [options.channel]);
  if (channels.length === 0) throw new TypeError(`bench worker options need "channel" or "channels"`);
  return channels;
}

const CONNECT_TIMEOUT_MS = 10_000;
/** The client's default bound on unconfirmed sends; a larger window raises it. */
const DEFAULT_MAX_PENDING = 10_000;

/** An Error with a code of the catalogue (the parent reads `code`), without importing the protocol. */
export function codedError(code: string, message: string): Error & { code: string } {
  return Object.assign(new Error(message), { code });
}

export async function connect(options: WorkerOptions, io: WorkerIo): Promise<BenchClient> {
  const hosts = options.hosts ?? (options.host ? [options.host] : null);
  if (!hosts) throw new TypeError(`bench worker options need "host" or "hosts"`);
  const mq = client();
  let lastError = "";
  mq.on("error", (error: Error & { code?: string }) => {
    lastError = `${error.code ?? "ERROR"}: ${error.message}`;
    io.warn(lastError);
  });
  // Keys live in the benchmark's temp folder (the parent removes it), never in the repository.
  const connected = mq.connect({
    hosts,
    clientId: options.clientId,
    keysDirectory: options.keysDirectory,
    maxPendingMessages: Math.max(DEFAULT_MAX_PENDING, options.window ?? 0),
  });
  connected.catch(() => {}); // awaited below, or abandoned past the deadline
  const unreachable = () =>
    codedError("UNREACHABLE", `Cannot connect to ${hosts.join(", ")} within ${CONNECT_TIMEOUT_MS / 1000} s${lastError ? `: ${lastError}` : ""}`);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(unreachable()), CONNECT_TIMEOUT_MS)));
  try {
    await Promise.race([connected, deadline]);
  } finally {
    clearTimeout(timer);
  }
  if (hosts.length > 1) {
    // connect() resolves with the first broker: wait for every one, so a run measures the
    // cluster from its first message (sends made before a link opens are replayed on it).
    const end = Date.now() + CONNECT_TIMEOUT_MS;
    while (!mq.status().every((s) => s.connected)) {
      if (Date.now() > end) {
        throw codedError("UNREACHABLE", `Cannot connect to every host within ${CONNECT_TIMEOUT_MS / 1000} s: ${JSON.stringify(mq.status())}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }
  return mq;
}
