/**
 * The scale-out scenario's plan and figures (`npm run bench -- --only s`; scripts/bench/scale_out.ts
 * runs it): N groups, each one broker process (`cluster.group` "g<i>", all on one etcd), the same
 * queues pinned evenly over them (`channels["q<k>/v1"].group`), the same publishers and consumers
 * for every N. Clients are given one broker as their seed and follow the queue map to each
 * queue's group, as any client does.
 *
 * Every publisher sends to its own queues (message `seq` to `queues[seq % n]`); one consumer per
 * publisher consumes the same queues. Each publisher's queues cover every group evenly, so every
 * client talks to every group. Each N is run twice over: at full speed (a window of unconfirmed
 * sends, like the work queue (a)), and paced at the same rate per group whatever N, so that every
 * broker carries the same load: a broker's CPU per message depends on its own rate, and at full
 * speed on a small machine N brokers each get a smaller share of it.
 *
 * What it reports per N: confirmed msg/s, the brokers' CPU per message (every broker process
 * together) and the clients', and a projection: N / (broker CPU per message), the rate N brokers
 * would reach if each had a core of its own and nothing they share ran out
 * (docs/benchmarks.md, "Scale-out: groups").
 */
import { warmupOf } from "./results.ts";
import type { Plan } from "./run.ts";

export interface ScaleOutSettings {
  /** The group counts to measure, in order (1, 2, 4). */
  groups: number[];
  /** Publisher processes; one consumer process each. */
  publishers: number;
  /** Full speed: messages in one run, every publisher together. */
  count: number;
  /** Unconfirmed sends per publisher, at most. */
  window: number;
  /** Unacked deliveries per consumer and queue. */
  prefetch: number;
  durability: "memory" | "fsync";
  /**
   * Paced runs: msg/s per group (N groups are sent N times this), so that every broker carries
   * the same rate whatever N; null: no paced runs.
   */
  ratePerGroup: number | null;
  /** Paced runs: seconds measured, after `pacedWarmupSeconds` of warm-up. */
  pacedSeconds: number;
  pacedWarmupSeconds: number;
}

/** "full": as fast as the window allows (the work queue); "paced": `ratePerGroup` × N msg/s in all. */
export type Load = "full" | "paced";

export const SCALE_OUT_DEFAULTS = {
  groups: [1, 2, 4],
  publishers: 2,
  window: 2000,
  prefetch: 1000,
  durability: "memory",
  ratePerGroup: 10_000,
  pacedSeconds: 4,
  pacedWarmupSeconds: 2,
} as const;
/** Past this many queues per publisher the group counts are refused (their least common multiple). */
const MAX_QUEUES_PER_PUBLISHER = 64;

export const groupName = (index: number) => `g${index + 1}`;
export const queueName = (index: number) => `q${index + 1}/v1`;
/** Every queue's messages go to this id of it. */
export const channelOf = (queue: string) => `${queue}/bench`;

/**
 * Queues per publisher: the least common multiple of the group counts, so that for every count
 * each publisher's queues fall evenly on the groups (1, 2, 4 → 4). The queues are the same for
 * every group count: only where they live changes.
 */
export function queuesPerPublisher(groups: readonly number[]): number {
  const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
  const lcm = groups.reduce((value, n) => (value * n) / gcd(value, n), 1);
  if (lcm > MAX_QUEUES_PER_PUBLISHER) {
    throw new RangeError(
      `Cannot spread queues evenly over ${groups.join(", ")} groups: that takes ${lcm} queues per publisher (at most ${MAX_QUEUES_PER_PUBLISHER})`,
    );
  }
  return lcm;
}

/** `--groups`: group counts separated by commas ("1,2,4"). */
export function parseGroups(text: string): number[] {
  const groups = text.split(",").map((n) => n.trim());
  if (!groups.every((n) => /^\d+$/.test(n) && Number(n) >= 1 && Number(n) <= 64)) {
    throw new RangeError(`--groups must be a list of group counts from 1 to 64: current value is "${text}"`);
  }
  return groups.map(Number);
}

/** Checks the settings; throws a RangeError naming the first bad one. */
export function checkScaleOut(settings: ScaleOutSettings): void {
  const { groups, publishers, count, ratePerGroup } = settings;
  if (groups.length === 0 || !groups.every((n) => Number.isSafeInteger(n) && n >= 1 && n <= 64)) {
    throw new RangeError(`--groups must be a list of group counts from 1 to 64: current value is "${groups.join(",")}"`);
  }
  if (!Number.isSafeInteger(publishers) || publishers < 1) throw new RangeError(`publishers must be >= 1: current value is ${publishers}`);
  if (!Number.isSafeInteger(count) || count < publishers * 4) {
    throw new RangeError(`Cannot split ${count} messages over ${publishers} publishers: at least 4 each`);
  }
  if (ratePerGroup !== null && !(Number.isSafeInteger(ratePerGroup) && ratePerGroup >= publishers)) {
    throw new RangeError(`--groups-rate must be a whole number of msg/s per group, at least ${publishers}, or 0 (no paced runs): current value is ${ratePerGroup}`);
  }
  queuesPerPublisher(groups);
}

/** Which group each queue lives on, for `groups` groups: queue k on g((k mod groups) + 1). */
export function placement(queueCount: number, groups: number): Record<string, { group: string }> {
  return Object.fromEntries(Array.from({ length: queueCount }, (_, k) => [queueName(k), { group: groupName(k % groups) }]));
}

/** The config of group `index`'s broker (merged over the benchmark's broker settings). */
export function groupBrokerConfig(
  index: number,
  groups: number,
  settings: ScaleOutSettings,
  etcd: { endpoint: string; prefix: string },
): Record<string, unknown> {
  const queueCount = settings.publishers * queuesPerPublisher(settings.groups);
  return {
    serviceId: `${groupName(index)}-1`,
    durability: settings.durability,
    channels: placement(queueCount, groups),
    cluster: {
      peers: [],
      minInSyncReplicas: 1,
      group: groupName(index),
      etcd: { endpoints: [etcd.endpoint], prefix: etcd.prefix, leaseTtlSeconds: 3 },
    },
  };
}

/** What each publisher sends with `groups` groups: its messages, how many are warm-up, and its rate (paced). */
export function perPublisher(settings: ScaleOutSettings, groups: number, load: Load): { count: number; warmup: number; rate: number | null } {
  if (load === "full") {
    const count = Math.floor(settings.count / settings.publishers);
    return { count, warmup: warmupOf(count), rate: null };
  }
  // The rate worker sends rate × (warm-up + measured seconds): exactly `count`.
  const rate = Math.floor((settings.ratePerGroup! * groups) / settings.publishers);
  return {
    count: Math.round(rate * (settings.pacedWarmupSeconds + settings.pacedSeconds)),
    warmup: Math.round(rate * settings.pacedWarmupSeconds),
    rate,
  };
}

/** The run's workers: publisher p and consumer p share the queues p × n … p × n + n − 1 (n per publisher). */
export function scaleOutPlan(settings: ScaleOutSettings, groups: number, load: Load, run: string): Plan {
  const perQueue = queuesPerPublisher(settings.groups);
  const { count, warmup, rate } = perPublisher(settings, groups, load);
  const channels = (p: number) => Array.from({ length: perQueue }, (_, i) => channelOf(queueName(p * perQueue + i)));
  const id = (role: string, p: number) => `bench-scale-${role}-${groups}g-${load}-${run}-${p + 1}`;
  const publishers = Array.from({ length: settings.publishers }, (_, p) =>
    rate === null
      ? { role: "publisher" as const, options: { channels: channels(p), clientId: id("publisher", p), count, warmup, window: settings.window } }
      : {
        role: "rate" as const,
        options: {
          channels: channels(p),
          clientId: id("publisher", p),
          rate,
          warmupSeconds: settings.pacedWarmupSeconds,
          seconds: settings.pacedSeconds,
          // The client's bound on unconfirmed sends: a second of them, so that a stall of the
          // shared cores delays confirmations instead of failing sends (QUEUE_FULL).
          window: Math.max(settings.window, rate),
        },
      }
  );
  return {
    receivers: Array.from({ length: settings.publishers }, (_, p) => ({
      role: "consumer" as const,
      options: { channels: channels(p), clientId: id("consumer", p), count, skip: warmup, prefetch: settings.prefetch },
    })),
    publisher: publishers[0]!,
    morePublishers: publishers.slice(1),
  };
}

/**
 * One run's figures (rates in msg/s, CPU in µs per message, every process of a kind together).
 * CPU is taken after the warm-up, from the first send after it to the last delivery (sampled
 * from /proc: src/bench/sampler.ts), over the messages consumed in that window; "whole run" also
 * counts the warm-up, when every process compiles its hot code (a cost per process, so it grows
 * with the number of brokers and says nothing about a broker that has run for a minute).
 */
export interface ScaleOutRun {
  groups: number;
  load: Load;
  sent: number;
  confirmed: number;
  received: number;
  duplicates: number;
  /** Sends confirmed after the warm-up, per second, from the first such send to the last confirmation. */
  confirmedPerSecond: number;
  /** The same, warm-up included. */
  confirmedPerSecondWholeRun: number;
  /** Messages consumed after the warm-up, per second (the work queue's rate). */
  consumedPerSecond: number;
  brokerUs: number;
  clientUs: number;
  publisherUs: number;
  consumerUs: number;
  brokerUsWholeRun: number;
  clientUsWholeRun: number;
  /** Each broker's CPU over the window's wall time: the cores it kept busy. */
  brokerCores: number[];
  /** etcd's CPU during the run (clients' start-up included), ms: nothing of the message path. */
  etcdMs: number;
  /** Publish → deliver p99 (worst consumer) and send → confirm p99 (worst publisher), ms. */
  p99: number;
  confirmP99: number | null;
  elapsedS: number;
  otherCores: number;
}

/**
 * The projection for N groups, from the medians. A broker's CPU per message falls as its own rate
 * rises (more messages per read, write and timer tick), so it is read at two rates:
 * - `estimate`: N × 1 / (broker µs per message of the baseline, the smallest group count, at full
 *   speed): every broker as busy as the one broker of the baseline, or more. It holds when the
 *   paced runs show that, at the same rate per broker, the CPU per message does not grow with N
 *   (`pacedVersusBaseline` near 1).
 * - `conservative`: N × 1 / (broker µs per message measured with N groups at full speed). Each of
 *   those brokers ran on a fraction of the machine's cores, so at a lower rate and a higher CPU
 *   per message than it would have on a core of its own; not a guaranteed floor.
 * Both assume each broker keeps a core of its own busy: a ceiling, not an operating point.
 */
export interface Projection {
  estimate: number;
  conservative: number;
  /** Cores the estimate takes with its clients on the same host: N × (broker + client µs) / broker µs (baseline's). */
  coresWithClients: number;
  /** Broker µs per message against the baseline's: at full speed, and paced (the same rate per broker). */
  fullVersusBaseline: number;
  pacedVersusBaseline: number | null;
}

export interface ProjectionInput {
  groups: number;
  full: { brokerUs: number; clientUs: number };
  paced: { brokerUs: number } | null;
}

export function projection(point: ProjectionInput, baseline: ProjectionInput): Projection {
  const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
  // One broker on a core of its own carries 1 / (its CPU per message) msg/s.
  const perBroker = 1e6 / baseline.full.brokerUs;
  return {
    estimate: Math.round(point.groups * perBroker),
    conservative: Math.round((point.groups * 1e6) / point.full.brokerUs),
    coresWithClients: Math.round((point.groups * (baseline.full.brokerUs + baseline.full.clientUs) / baseline.full.brokerUs) * 10) / 10,
    fullVersusBaseline: ratio(point.full.brokerUs, baseline.full.brokerUs),
    pacedVersusBaseline: point.paced && baseline.paced ? ratio(point.paced.brokerUs, baseline.paced.brokerUs) : null,
  };
}
