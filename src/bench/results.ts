/**
 * What the benchmark's workers report, and how one run's reports become its figures: rates after
 * the warm-up (and over the whole run), worst-listener latency, CPU per process kind, and the
 * cores other processes of the machine kept busy meanwhile.
 */
import { type Cpu, cpuSeconds, cpuTotal } from "./processes.ts";
import type { Latency } from "./worker/stats.ts";

export type { Latency };

/**
 * Figures are taken at steady state: the first quarter of the messages is warm-up (JIT
 * compilation of several processes sharing the cores), left out of the rate and the latency.
 * The figures over the whole run are reported too.
 */
export const WARMUP_SHARE = 0.25;
export const warmupOf = (count: number) => Math.round(count * WARMUP_SHARE);

export function fmt(value: number): string {
  return Math.round(value).toLocaleString("en-US");
}

/** `3.42`, `12.3`, `140`: milliseconds with about three significant digits. */
export function ms(value: number): string {
  return value < 10 ? value.toFixed(2) : value < 100 ? value.toFixed(1) : value.toFixed(0);
}

export interface ReceiverResult {
  role: string;
  clientId: string;
  expected: number;
  received: number;
  /** Received after the warm-up (`seq >= skip`): the rate's numerator. */
  measured: number;
  duplicates: number;
  outOfRange: number;
  errors: number;
  firstAt: number;
  lastAt: number;
  latency: Latency | null;
  /** The same percentiles with the warm-up included (null when there is no warm-up). */
  latencyWholeRun: Latency | null;
  cpu: { userMs: number; systemMs: number };
  /**
   * The prefetch a consumer asked (null: a listener, which asks none) and the smallest the broker
   * granted (null: not said).
   */
  prefetch: { asked: number | null; granted: number | null };
}

export interface PublisherResult {
  role: string;
  sent: number;
  confirmed: number;
  failed: number;
  firstError: string;
  /** The code of the first failed send ("" when none failed). */
  firstErrorCode?: string;
  firstAt: number;
  /** When the first send after the warm-up was made: the rate's window starts there. */
  warmAt: number;
  lastSendAt: number;
  lastConfirmAt: number;
  achievedRate?: number;
  maxBatch?: number;
  /** send() → confirmation, ms (publisher role). */
  confirmLatency?: { p50: number; p99: number } | null;
  /** The same with the warm-up included (the paced publisher's only). */
  confirmLatencyWholeRun?: { p50: number; p99: number } | null;
  maxBehindMs?: number;
  /** CPU used before the first send (process start, connect). */
  startCpu: { userMs: number; systemMs: number };
  cpu: { userMs: number; systemMs: number };
}

export interface RunResult {
  /** Headline rate: msgs/s (a, c) or deliveries/s (b). */
  rate: number;
  /** The same over the whole run, warm-up included. */
  wholeRunRate: number;
  /** Publisher's confirmed sends per second. */
  confirmRate: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  /** send() → confirmation p99, ms, past the warm-up; null when the publisher did not time it. */
  confirmP99: number | null;
  elapsedS: number;
  duplicates: number;
  failedSends: number;
  /** Messages delivered (all receivers): the divisor of the CPU-per-message figures. */
  deliveries: number;
  /** CPU while messages flowed: broker and receivers from the publisher's start, publisher from its first send. */
  cpu: { broker: Cpu; publisher: Cpu; receivers: Cpu };
  /** Cores kept busy by processes outside the benchmark during the run (shared machine). */
  otherCores: number;
  note: string;
}

export interface Snapshot {
  at: number;
  machine: number;
  self: Cpu;
  /** Every broker together (master and slaves). */
  broker: Cpu;
  /** Each broker, master first. */
  brokers: Cpu[];
  receivers: Cpu[];
}

export type Median = Omit<RunResult, "note" | "cpu"> & { cpu: RunResult["cpu"] };

/**
 * Several publishers' reports as one: counts and CPU summed, the first start and the first send
 * after the warm-up (the rate's window opens with the earliest, so a late publisher lowers the
 * rate rather than raising it), the last send and confirmation, the first error, and the worst
 * confirm latency of each percentile. One report is returned as it is.
 */
export function mergePublished(results: PublisherResult[]): PublisherResult {
  if (results.length === 1) return results[0]!;
  if (results.length === 0) throw new RangeError("Cannot merge publisher reports: there is none");
  const sum = (pick: (r: PublisherResult) => number) => results.reduce((total, r) => total + pick(r), 0);
  const cpuSum = (pick: (r: PublisherResult) => { userMs: number; systemMs: number }) => ({
    userMs: sum((r) => pick(r).userMs),
    systemMs: sum((r) => pick(r).systemMs),
  });
  const failedFirst = results.find((r) => r.failed > 0);
  const latencies = results.map((r) => r.confirmLatency ?? null);
  const known = latencies.filter((l): l is { p50: number; p99: number } => l !== null);
  return {
    role: results[0]!.role,
    sent: sum((r) => r.sent),
    confirmed: sum((r) => r.confirmed),
    failed: sum((r) => r.failed),
    firstError: failedFirst?.firstError ?? "",
    firstErrorCode: failedFirst?.firstErrorCode ?? "",
    firstAt: Math.min(...results.map((r) => r.firstAt)),
    warmAt: Math.min(...results.map((r) => r.warmAt)),
    lastSendAt: Math.max(...results.map((r) => r.lastSendAt)),
    lastConfirmAt: Math.max(...results.map((r) => r.lastConfirmAt)),
    confirmLatency: known.length === latencies.length
      ? { p50: Math.max(...known.map((l) => l.p50)), p99: Math.max(...known.map((l) => l.p99)) }
      : null,
    startCpu: cpuSum((r) => r.startCpu),
    cpu: cpuSum((r) => r.cpu),
  };
}

export function summarize(
  published: PublisherResult,
  received: ReceiverResult[],
  before: Snapshot,
  after: Snapshot,
): RunResult {
  const lastAt = Math.max(...received.map((r) => r.lastAt));
  const elapsedS = (lastAt - published.firstAt) / 1000;
  const deliveries = received.reduce((sum, r) => sum + r.received, 0);
  const measured = received.reduce((sum, r) => sum + r.measured, 0);
  const measuredS = (lastAt - published.warmAt) / 1000;
  const latencies = received.map((r) => r.latency).filter((l): l is Latency => l !== null);
  // Several listeners: each one's percentiles are exact; the table shows the worst listener's.
  const worst = (key: keyof Latency) => Math.max(...latencies.map((l) => l[key]));
  const minus = (a: Cpu, b: Cpu): Cpu => ({ user: a.user - b.user, system: a.system - b.system });
  const plus = (a: Cpu, b: Cpu): Cpu => ({ user: a.user + b.user, system: a.system + b.system });
  const brokerCpu = minus(after.broker, before.broker);
  const receiversCpu = received.map((r, i) => minus(cpuSeconds(r.cpu), before.receivers[i]!)).reduce(plus);
  const publisherAll = cpuSeconds(published.cpu);
  const selfCpu = minus(after.self, before.self);
  // Everything the machine did during the run that was not the benchmark's own processes.
  const ours = [brokerCpu, receiversCpu, publisherAll, selfCpu].reduce((sum, c) => sum + cpuTotal(c), 0);
  const otherCores = Math.max(0, (after.machine - before.machine - ours) / ((after.at - before.at) / 1000));
  const notes: string[] = [];
  if (published.failed > 0) notes.push(`${published.failed} sends failed (${published.firstError})`);
  // The same figures over the whole run, warm-up included, so that both are on record.
  if (measured < deliveries) {
    const wholeRun = received.map((r) => r.latencyWholeRun).filter((l): l is Latency => l !== null);
    const p99 = wholeRun.length > 0 ? `, p99 ${ms(Math.max(...wholeRun.map((l) => l.p99)))} ms` : "";
    notes.push(`whole run ${fmt(deliveries / elapsedS)}/s${p99}`);
  }
  if (published.achievedRate !== undefined) {
    notes.push(`sent at ${published.achievedRate}/s, ≤${published.maxBatch}/batch`);
  }
  if (published.confirmLatency) {
    const wholeRun = published.confirmLatencyWholeRun ? ` (whole run p99 ${published.confirmLatencyWholeRun.p99} ms)` : "";
    notes.push(`confirm p50 ${published.confirmLatency.p50} ms p99 ${published.confirmLatency.p99} ms${wholeRun}`);
  }
  return {
    rate: Math.round(measured / measuredS),
    wholeRunRate: Math.round(deliveries / elapsedS),
    confirmRate: Math.round(published.confirmed / ((published.lastConfirmAt - published.firstAt) / 1000)),
    p50: worst("p50"),
    p90: worst("p90"),
    p99: worst("p99"),
    max: worst("max"),
    confirmP99: published.confirmLatency?.p99 ?? null,
    elapsedS,
    duplicates: received.reduce((sum, r) => sum + r.duplicates, 0),
    failedSends: published.failed,
    deliveries,
    cpu: { broker: brokerCpu, publisher: minus(publisherAll, cpuSeconds(published.startCpu)), receivers: receiversCpu },
    otherCores,
    note: notes.join("; "),
  };
}
