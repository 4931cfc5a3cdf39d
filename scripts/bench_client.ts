/**
 * One client process of the benchmark (`scripts/bench.ts` starts it; it is not meant to be run
 * by hand). It uses the real client from `mod.ts`, so client CPU is paid as in real life.
 *
 *   bun scripts/bench_client.ts <role> '<json options>'
 *
 * Roles:
 *   publisher  sends `count` messages, keeping at most `window` unconfirmed `send()` promises
 *   rate       sends `rate` msg/s for `warmupSeconds + seconds`, paced in small batches every ms;
 *              on SIGTERM it prints `partial` with its confirmations so far (a probe of pauses)
 *   consumer   consume(channel, …, { prefetch }) and done() each message, until `count` unique
 *   listener   listen(channel, …) with its own clientId, until `count` unique
 *
 * Protocol with the parent, one line each on stdout: `ready` once the subscription is accepted
 * (receivers) or the connection is up (senders), then `result <json>` at the end. On SIGTERM
 * (the parent's timeout) a receiver prints `partial <json>` with what it saw so far, then exits.
 *
 * Clock: publisher and receivers are different processes, so a send timestamp is
 * `performance.timeOrigin + performance.now()`: wall-clock based (shared by every process on the
 * machine) with sub-millisecond precision. `process.hrtime()` is per-process in Bun.
 */
import { client } from "../mod.ts";
import { cpu, now, percentiles, round } from "./bench/stats.ts";

interface Options {
  /** One broker (`host:port@serviceId`)… */
  host?: string;
  /** …or several (a master and its slaves): the client connects to all of them. */
  hosts?: string[];
  keysDirectory: string;
  channel: string;
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
}

interface Payload {
  seq: number;
  t: number;
  [key: string]: unknown;
}

/** The ~100-byte object every benchmark message carries (about 95 bytes once CBOR-encoded). */
export function payload(seq: number): Payload {
  return { seq, t: now(), type: "order.created", user: "user-004217", amount: 1234.5, currency: "EUR", items: 3 };
}

function emit(kind: "ready" | "result" | "partial", data?: unknown): void {
  process.stdout.write(data === undefined ? `${kind}\n` : `${kind} ${JSON.stringify(data)}\n`);
}

function fail(message: string): never {
  process.stderr.write(`bench_client: ${message}\n`);
  process.exit(1);
}

async function connect(options: Options) {
  const hosts = options.hosts ?? (options.host ? [options.host] : fail(`options need "host" or "hosts"`));
  const mq = client();
  let lastError = "";
  mq.on("error", (error: Error & { code?: string }) => {
    lastError = `${error.code ?? "ERROR"}: ${error.message}`;
    process.stderr.write(`bench_client ${options.clientId}: ${lastError}\n`);
  });
  const timer = setTimeout(() => fail(`cannot connect to ${hosts.join(", ")} within 10 s ${lastError}`), 10_000);
  // Keys live in the benchmark's temp folder (the parent removes it), never in the repository.
  await mq.connect({ hosts, clientId: options.clientId, keysDirectory: options.keysDirectory });
  clearTimeout(timer);
  if (hosts.length > 1) {
    // connect() resolves with the first broker: wait for every one, so a run measures the
    // cluster from its first message (sends made before a link opens are replayed on it).
    const deadline = Date.now() + 10_000;
    while (!mq.status().every((s) => s.connected)) {
      if (Date.now() > deadline) fail(`not every host connected within 10 s: ${JSON.stringify(mq.status())}`);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }
  return mq;
}

// ── receivers ──────────────────────────────────────────────────────────────────────────────────

async function receive(kind: "consume" | "listen", options: Options): Promise<void> {
  const count = options.count;
  const skip = options.skip ?? 0;
  const seen = new Uint8Array(count);
  const latency = new Float64Array(count);
  let unique = 0;
  let duplicates = 0;
  let outOfRange = 0;
  let errors = 0;
  let firstAt = 0;
  let lastAt = 0;
  let finished = false;

  const summary = () => ({
    role: kind === "consume" ? "consumer" : "listener",
    clientId: options.clientId,
    expected: count,
    received: unique,
    measured: countFrom(seen, skip),
    duplicates,
    outOfRange,
    errors,
    firstAt,
    lastAt,
    latency: percentiles(latency, seen, skip, count),
    latencyWholeRun: skip > 0 ? percentiles(latency, seen, 0, count) : null,
    cpu: cpu(),
  });

  const onMessage = (message: unknown): void => {
    const at = now();
    const seq = (message as Payload).seq;
    if (!(seq >= 0 && seq < count)) {
      outOfRange++;
      return;
    }
    if (seen[seq]) {
      duplicates++;
      return;
    }
    seen[seq] = 1;
    latency[seq] = at - (message as Payload).t;
    if (unique === 0) firstAt = at;
    unique++;
    lastAt = at;
    if (unique === count && !finished) {
      finished = true;
      // Let the last acks leave before reporting and closing.
      setTimeout(async () => {
        emit("result", summary());
        await mq.disconnect();
        process.exit(0);
      }, 20);
    }
  };

  process.once("SIGTERM", () => {
    emit("partial", summary());
    process.exit(2);
  });

  const mq = await connect(options);
  const subscription = kind === "consume"
    ? mq.consume(options.channel, (error, message, done) => {
      if (error) {
        errors++;
        process.stderr.write(`bench_client ${options.clientId}: ${error.code}: ${error.message}\n`);
        return;
      }
      done();
      onMessage(message);
    }, { prefetch: options.prefetch ?? 1000 })
    : mq.listen(options.channel, (error, message) => {
      if (error) {
        errors++;
        process.stderr.write(`bench_client ${options.clientId}: ${error.code}: ${error.message}\n`);
        return;
      }
      onMessage(message);
    });
  await subscription.ready;
  emit("ready");
}

/** Messages received with `seq >= skip` (those after the warm-up). */
function countFrom(seen: Uint8Array, skip: number): number {
  let count = 0;
  for (let seq = skip; seq < seen.length; seq++) count += seen[seq]!;
  return count;
}

// ── senders ────────────────────────────────────────────────────────────────────────────────────

/** Counts the settlements of `total` sends; `finished` resolves once every one is settled. */
class Confirmations {
  confirmed = 0;
  failed = 0;
  firstError = "";
  lastConfirmAt = 0;
  // Not Promise.withResolvers: the benchmark runs this file on Node 20 too, which lacks it.
  #resolveDone!: () => void;
  readonly #finished = new Promise<void>((resolve) => (this.#resolveDone = resolve));
  constructor(readonly total: number, readonly onSettled: () => void = () => {}) {}

  get finished(): Promise<void> {
    return this.#finished;
  }

  get settled(): number {
    return this.confirmed + this.failed;
  }

  ok = (): void => {
    this.confirmed++;
    this.#after();
  };

  error = (error: Error & { code?: string }): void => {
    this.failed++;
    this.firstError ||= `${error.code ?? "ERROR"}: ${error.message}`;
    this.#after();
  };

  #after(): void {
    if (this.settled < this.total) return this.onSettled();
    this.lastConfirmAt = now();
    this.#resolveDone();
  }
}

/** Sends `count` messages as fast as confirms allow, `window` unconfirmed at most. */
async function publish(options: Options): Promise<void> {
  const count = options.count;
  const window = options.window ?? 2000;
  const warmup = options.warmup ?? 0;
  const mq = await connect(options);
  emit("ready");
  let sent = 0;
  let lastSendAt = 0;
  let warmAt = 0;
  const confirmations = new Confirmations(count, () => pump());
  // Publish → confirm latency of every send (the broker's commit is part of it in durable modes).
  const confirmLatency = new Float64Array(count);
  const confirmedSeen = new Uint8Array(count);
  const pump = () => {
    while (sent < count && sent - confirmations.settled < window) {
      const seq = sent;
      const sentAt = now();
      if (seq === warmup) warmAt = sentAt;
      mq.send(options.channel, payload(seq)).then(() => {
        confirmLatency[seq] = now() - sentAt;
        confirmedSeen[seq] = 1;
        confirmations.ok();
      }, confirmations.error);
      sent++;
    }
    if (sent === count && lastSendAt === 0) lastSendAt = now();
  };

  const startCpu = cpu();
  const firstAt = now();
  pump();
  await confirmations.finished;
  await finishPublisher(mq, confirmations, { sent, firstAt, warmAt, lastSendAt, startCpu }, {
    confirmLatency: percentiles(confirmLatency, confirmedSeen, warmup, count),
  });
}

/**
 * Sends at a fixed rate: every ~1 ms timer tick it sends what the schedule says is due by now,
 * so a late tick catches up with a slightly bigger batch instead of drifting. Confirms are not
 * awaited before the next send (at 5k/s the window never fills).
 */
async function publishAtRate(options: Options): Promise<void> {
  const rate = options.rate ?? 5000;
  const total = Math.round(rate * ((options.warmupSeconds ?? 0) + (options.seconds ?? 5)));
  const warmup = Math.round(rate * (options.warmupSeconds ?? 0));
  const mq = await connect(options);
  emit("ready");
  let sent = 0;
  let warmAt = 0;
  let maxBatch = 0;
  let maxBehindMs = 0;
  let lastSendAt = 0;
  const confirmations = new Confirmations(total);
  // The longest send → confirm, and the sends that waited more than 20 ms (when, how long).
  let maxConfirmMs = 0;
  const slowConfirms: [sentAt: number, ms: number][] = [];
  const confirmed = (sentAt: number) => () => {
    const ms = now() - sentAt;
    if (ms > maxConfirmMs) maxConfirmMs = ms;
    if (ms > 20 && slowConfirms.length < 10_000) slowConfirms.push([round(sentAt), round(ms)]);
    confirmations.ok();
  };
  process.once("SIGTERM", () => {
    const { confirmed, failed, firstError } = confirmations;
    emit("partial", { role: "publisher", sent, confirmed, failed, firstError, maxConfirmMs: round(maxConfirmMs), slowConfirms });
    process.exit(2);
  });

  const startCpu = cpu();
  const firstAt = now();
  const tick = () => {
    const at = now();
    const due = Math.min(total, Math.floor((at - firstAt) * rate / 1000) + 1);
    const batch = due - sent;
    if (batch > maxBatch) maxBatch = batch;
    if (batch > 0) maxBehindMs = Math.max(maxBehindMs, at - (firstAt + sent * 1000 / rate));
    while (sent < due) {
      if (sent === warmup) warmAt = now();
      mq.send(options.channel, payload(sent)).then(confirmed(now()), confirmations.error);
      sent++;
    }
    if (sent < total) setTimeout(tick, 1);
    else lastSendAt = now();
  };
  tick();
  await confirmations.finished;
  await finishPublisher(mq, confirmations, { sent, firstAt, warmAt, lastSendAt, startCpu }, {
    achievedRate: Math.round(sent / ((lastSendAt - firstAt) / 1000)),
    maxConfirmMs: round(maxConfirmMs),
    maxBatch,
    maxBehindMs: round(maxBehindMs),
  });
}

/** Both publishers' end: the result line (common fields, then the role's own), then exit. */
async function finishPublisher(
  mq: Awaited<ReturnType<typeof connect>>,
  confirmations: Confirmations,
  run: { sent: number; firstAt: number; warmAt: number; lastSendAt: number; startCpu: ReturnType<typeof cpu> },
  extra: Record<string, unknown>,
): Promise<void> {
  const { confirmed, failed, firstError, lastConfirmAt } = confirmations;
  emit("result", { role: "publisher", ...run, confirmed, failed, firstError, lastConfirmAt, ...extra, cpu: cpu() });
  await mq.disconnect();
  process.exit(0);
}

// ── main ───────────────────────────────────────────────────────────────────────────────────────

if (import.meta.main) {
  const [role, json] = process.argv.slice(2);
  let options: Options;
  try {
    options = JSON.parse(json ?? "");
  } catch {
    fail(`usage: bun scripts/bench_client.ts <publisher|rate|consumer|listener> '<json options>'`);
  }
  const run = role === "publisher"
    ? publish
    : role === "rate"
    ? publishAtRate
    : role === "consumer"
    ? (o: Options) => receive("consume", o)
    : role === "listener"
    ? (o: Options) => receive("listen", o)
    : fail(`unknown role "${role}"`);
  run(options).catch((error) => fail((error as Error)?.stack ?? String(error)));
}
