/**
 * The scenarios of `kitten-mq bench`, each one plan of src/bench/run.ts:
 *   work     1 publisher, `window` unconfirmed sends at most → 1 consumer acking each message
 *   fanout   1 publisher, the same window → `listeners` listening clients (one clientId each)
 *   latency  1 publisher at `rate` msg/s → 1 consumer acking: publish → deliver latency
 * The first WARMUP_SHARE of every scenario's messages is warm-up: out of the steady-state figures.
 */
import { encode } from "../protocol/cbor.ts";
import { warmupOf } from "./results.ts";
import type { Plan } from "./run.ts";
import { paddedPayload } from "./worker/payload.ts";

export const SCENARIOS = ["work", "fanout", "latency"] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

/** What the command line chose (defaults in DEFAULTS). */
export interface Settings {
  /** Messages per scenario; null: each scenario's default (DEFAULT_COUNTS). */
  count: number | null;
  /** Body bytes (CBOR). */
  size: number;
  window: number;
  /** Unacked deliveries each consumer asks for (consume's prefetch); the broker caps it at its channel's. */
  prefetch: number;
  listeners: number;
  rate: number;
  /** `endpoint/version`: each scenario sends to `<channel>/<scenario>-<run id>`. */
  channel: string;
}

export const DEFAULTS = { size: 128, window: 1000, prefetch: 1000, listeners: 4, rate: 5000, channel: "bench/v1" } as const;
/** The latency scenario's default: 5 s at its rate. */
export const LATENCY_SECONDS = 5;
export const DEFAULT_COUNTS = { work: 100_000, fanout: 100_000 } as const;

export interface Scenario {
  name: ScenarioName;
  title: string;
  channel: string;
  /** Messages the publisher sends; every receiver gets each. */
  count: number;
  warmup: number;
  receivers: number;
  /** Bytes of the largest body (CBOR). */
  bodyBytes: number;
  plan: Plan;
  /** Past it the run is stopped: 30 s, plus the sending time at 1,000 msg/s (or at its rate). */
  timeoutMs: number;
}

/**
 * The body for `size` bytes: `{seq, t, pad}` with the pad's length that makes it `size` bytes of
 * CBOR for the largest seq (smaller seqs encode a few bytes shorter), or the smallest body.
 */
export function bodyFor(size: number, count: number): { pad: number; bytes: number } {
  const bytes = (length: number) => encode(paddedPayload(length)(count - 1)).length;
  let pad = Math.max(0, size - bytes(0));
  // The pad's own length prefix grows at 24 and 256 characters: step back until it fits.
  while (pad > 0 && bytes(pad) > size) pad--;
  return { pad, bytes: bytes(pad) };
}

/** The smallest `--size`: a body with an empty pad and a large seq. */
export function smallestBody(): number {
  return bodyFor(0, 2 ** 31).bytes;
}

/** `name`'s plan; `runId` keeps the channel and client ids of every run apart. */
export function scenario(name: ScenarioName, settings: Settings, runId: string): Scenario {
  const count = settings.count ?? (name === "latency" ? settings.rate * LATENCY_SECONDS : DEFAULT_COUNTS[name]);
  const warmup = warmupOf(count);
  const channel = `${settings.channel}/${name}-${runId}`;
  const id = (role: string) => `kitten-mq-bench-${runId}-${role}`;
  const { pad, bytes: bodyBytes } = bodyFor(settings.size, count);
  const consumer = { role: "consumer" as const, options: { channel, clientId: id("consumer"), count, skip: warmup, prefetch: settings.prefetch } };
  const sendingMs = (rate: number) => Math.ceil((count / rate) * 1000);
  if (name === "latency") {
    const rate = settings.rate;
    // The rate worker sends rate × (warm-up + measured seconds) messages: exactly `count`.
    const options = { channel, clientId: id("publisher"), rate, warmupSeconds: warmup / rate, seconds: (count - warmup) / rate, pad };
    return {
      name,
      title: `latency: 1 publisher at ${rate.toLocaleString("en-US")} msg/s → 1 consumer acking`,
      channel,
      count,
      warmup,
      receivers: 1,
      bodyBytes,
      plan: { receivers: [consumer], publisher: { role: "rate", options } },
      timeoutMs: 30_000 + sendingMs(rate),
    };
  }
  const publisher = { role: "publisher" as const, options: { channel, clientId: id("publisher"), count, warmup, window: settings.window, pad } };
  if (name === "work") {
    return {
      name,
      title: `work queue: 1 publisher (window ${settings.window}) → 1 consumer acking`,
      channel,
      count,
      warmup,
      receivers: 1,
      bodyBytes,
      plan: { receivers: [consumer], publisher },
      timeoutMs: 30_000 + sendingMs(1000),
    };
  }
  const listeners = Array.from({ length: settings.listeners }, (_, i) => ({
    role: "listener" as const,
    options: { channel, clientId: id(`listener-${i + 1}`), count, skip: warmup },
  }));
  return {
    name,
    title: `fan-out: 1 publisher (window ${settings.window}) → ${settings.listeners} listeners`,
    channel,
    count,
    warmup,
    receivers: settings.listeners,
    bodyBytes,
    plan: { receivers: listeners, publisher },
    timeoutMs: 30_000 + sendingMs(1000),
  };
}
