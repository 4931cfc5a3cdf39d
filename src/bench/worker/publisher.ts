/**
 * The sending workers:
 *   publisher  sends `count` messages, keeping at most `window` unconfirmed `send()` promises
 *   rate       sends `rate` msg/s for `warmupSeconds + seconds`, paced in small batches every ms;
 *              when stopped it reports its confirmations so far (a probe of pauses)
 * Each reports when it sent (first, first after the warm-up, last), what was confirmed, and its CPU.
 * With several channels, message `seq` goes to `channels[seq % n]`.
 */
import { type BenchClient, channelsOf, connect, type Connector, type WorkerIo, type WorkerOptions } from "./connect.ts";
import { paddedPayload, payload, type Payload } from "./payload.ts";
import { cpu, Latencies, now, round } from "./stats.ts";

/** Counts the settlements of `total` sends; `finished` resolves once every one is settled. */
class Confirmations {
  confirmed = 0;
  failed = 0;
  firstError = "";
  firstErrorCode = "";
  lastConfirmAt = 0;
  // Not Promise.withResolvers: the benchmark runs the workers on Node 20 too, which lacks it.
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
    if (!this.firstError) {
      this.firstErrorCode = error.code ?? "INTERNAL";
      this.firstError = `${error.code ?? "ERROR"}: ${error.message}`;
    }
    this.#after();
  };

  #after(): void {
    if (this.settled < this.total) return this.onSettled();
    this.lastConfirmAt = now();
    this.#resolveDone();
  }
}

function bodies(options: WorkerOptions): (seq: number) => Payload {
  return options.pad === undefined ? payload : paddedPayload(options.pad);
}

/** Sends `count` messages as fast as confirms allow, `window` unconfirmed at most. */
export async function publish(options: WorkerOptions, io: WorkerIo, open: Connector = connect): Promise<void> {
  const count = options.count;
  const window = options.window ?? 2000;
  const warmup = options.warmup ?? 0;
  const body = bodies(options);
  const channels = channelsOf(options);
  const mq = await open(options, io);
  io.emit("ready", { cpu: cpu() });
  let sent = 0;
  let lastSendAt = 0;
  let warmAt = 0;
  const confirmations = new Confirmations(count, () => pump());
  // Publish → confirm latency of every send (the broker's commit is part of it in durable modes).
  const confirmLatency = new Latencies(count);
  const pump = () => {
    while (sent < count && sent - confirmations.settled < window) {
      const seq = sent;
      const sentAt = now();
      if (seq === warmup) warmAt = sentAt;
      mq.send(channels[seq % channels.length]!, body(seq)).then(() => {
        confirmLatency.record(seq, now() - sentAt);
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
  await finishPublisher(mq, io, confirmations, { sent, firstAt, warmAt, lastSendAt, startCpu }, {
    confirmLatency: confirmLatency.percentiles(warmup),
  });
}

/**
 * Sends at a fixed rate: every ~1 ms timer tick it sends what the schedule says is due by now,
 * so a late tick catches up with a slightly bigger batch instead of drifting. Confirms are not
 * awaited before the next send (at 5k/s the window never fills).
 */
export async function publishAtRate(options: WorkerOptions, io: WorkerIo, open: Connector = connect): Promise<void> {
  const rate = options.rate ?? 5000;
  const total = Math.round(rate * ((options.warmupSeconds ?? 0) + (options.seconds ?? 5)));
  const warmup = Math.round(rate * (options.warmupSeconds ?? 0));
  const body = bodies(options);
  const channels = channelsOf(options);
  const mq = await open(options, io);
  io.emit("ready", { cpu: cpu() });
  let sent = 0;
  let warmAt = 0;
  let maxBatch = 0;
  let maxBehindMs = 0;
  let lastSendAt = 0;
  const confirmations = new Confirmations(total);
  // Each send → confirm (percentiles past the warm-up), the longest, and the sends that waited
  // more than 20 ms (when, how long).
  const confirmMs = new Latencies(total);
  let maxConfirmMs = 0;
  const slowConfirms: [sentAt: number, ms: number][] = [];
  const confirmed = (seq: number, sentAt: number) => () => {
    const ms = now() - sentAt;
    confirmMs.record(seq, ms);
    if (ms > maxConfirmMs) maxConfirmMs = ms;
    if (ms > 20 && slowConfirms.length < 10_000) slowConfirms.push([round(sentAt), round(ms)]);
    confirmations.ok();
  };
  io.partial = () => {
    const { confirmed, failed, firstError } = confirmations;
    return { role: "publisher", sent, confirmed, failed, firstError, maxConfirmMs: round(maxConfirmMs), slowConfirms };
  };

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
      mq.send(channels[sent % channels.length]!, body(sent)).then(confirmed(sent, now()), confirmations.error);
      sent++;
    }
    if (sent < total) setTimeout(tick, 1);
    else lastSendAt = now();
  };
  tick();
  await confirmations.finished;
  await finishPublisher(mq, io, confirmations, { sent, firstAt, warmAt, lastSendAt, startCpu }, {
    achievedRate: Math.round(sent / ((lastSendAt - firstAt) / 1000)),
    maxConfirmMs: round(maxConfirmMs),
    confirmLatency: confirmMs.percentiles(warmup),
    confirmLatencyWholeRun: confirmMs.percentiles(0),
    maxBatch,
    maxBehindMs: round(maxBehindMs),
  });
}

/** Both publishers' end: the result line (common fields, then the role's own), then disconnect. */
async function finishPublisher(
  mq: BenchClient,
  io: WorkerIo,
  confirmations: Confirmations,
  run: { sent: number; firstAt: number; warmAt: number; lastSendAt: number; startCpu: ReturnType<typeof cpu> },
  extra: Record<string, unknown>,
): Promise<void> {
  const { confirmed, failed, firstError, firstErrorCode, lastConfirmAt } = confirmations;
  io.emit("result", { role: "publisher", ...run, confirmed, failed, firstError, firstErrorCode, lastConfirmAt, ...extra, cpu: cpu() });
  await mq.disconnect();
}
