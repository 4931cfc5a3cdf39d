/**
 * What `kitten-mq bench` reports for one scenario, from its run's outcome: counts, rates (steady
 * state and whole run), publish → deliver latency of the worst receiver, and CPU per message of
 * each kind of process. Every figure is measured; the broker's CPU is null when it runs elsewhere.
 */
import { type Cpu, cpuTotal } from "./processes.ts";
import type { Latency, ReceiverResult } from "./results.ts";
import type { RunOutcome } from "./run.ts";
import type { Scenario, ScenarioName } from "./scenarios.ts";

export interface Percentiles {
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export interface ScenarioFigures {
  name: ScenarioName;
  title: string;
  channel: string;
  messages: {
    /** Sent by the publisher, and confirmed by the broker. */
    sent: number;
    confirmed: number;
    failed: number;
    /** The first `warmup` sent are left out of the steady-state figures. */
    warmup: number;
    receivers: number;
    /** Unique messages received, every receiver together: `sent × receivers` when none is lost. */
    received: number;
    duplicates: number;
    bodyBytes: number;
  };
  /** Messages per second (each delivered to every receiver), deliveries and confirmations per second. */
  rate: {
    steady: number;
    wholeRun: number;
    deliveriesSteady: number;
    confirms: number;
    /** The latency scenario: the rate asked for and the rate the publisher kept. */
    target: number | null;
    achieved: number | null;
  };
  /** Publish → deliver (ms) after the warm-up, the worst receiver's of each percentile (null: none measured). */
  latencyMs: Percentiles | null;
  /** The same with the warm-up included. */
  latencyWholeRunMs: Percentiles | null;
  /** CPU (user + system) per message sent, µs, while messages flowed; receivers together. */
  cpuUsPerMessage: { publisher: number; receivers: number; broker: number | null };
  elapsedSeconds: number;
  /** Cores other processes of this machine kept busy meanwhile (null: the broker is elsewhere). */
  otherCores: number | null;
  /**
   * The unacked deliveries each receiver may hold: what a consumer asked (null for listeners,
   * which ask none) and the least the broker granted (its channel's cap; null when not said).
   */
  prefetch: { asked: number | null; granted: number | null };
}

const round1 = (value: number) => Math.round(value * 10) / 10;

/** The worst of each percentile over the receivers' latencies. */
function worst(latencies: (Latency | null)[]): Percentiles | null {
  const known = latencies.filter((l): l is Latency => l !== null);
  if (known.length === 0) return null;
  const max = (key: keyof Percentiles) => Math.max(...known.map((l) => l[key]));
  return { p50: max("p50"), p90: max("p90"), p99: max("p99"), max: max("max") };
}

export function scenarioFigures(scenario: Scenario, outcome: RunOutcome, brokerMeasured: boolean): ScenarioFigures {
  const { summary, published, received } = outcome;
  const perMessage = (cpu: Cpu) => round1((cpuTotal(cpu) / published.sent) * 1e6);
  return {
    name: scenario.name,
    title: scenario.title,
    channel: scenario.channel,
    messages: {
      sent: published.sent,
      confirmed: published.confirmed,
      failed: published.failed,
      warmup: scenario.warmup,
      receivers: scenario.receivers,
      received: summary.deliveries,
      duplicates: summary.duplicates,
      bodyBytes: scenario.bodyBytes,
    },
    rate: {
      steady: Math.round(summary.rate / scenario.receivers),
      wholeRun: Math.round(summary.wholeRunRate / scenario.receivers),
      deliveriesSteady: summary.rate,
      confirms: summary.confirmRate,
      target: scenario.name === "latency" ? (scenario.plan.publisher.options.rate as number) : null,
      achieved: published.achievedRate ?? null,
    },
    latencyMs: worst(received.map((r) => r.latency)),
    latencyWholeRunMs: worst(received.map((r) => r.latencyWholeRun)),
    cpuUsPerMessage: {
      publisher: perMessage(summary.cpu.publisher),
      receivers: perMessage(summary.cpu.receivers),
      broker: brokerMeasured ? perMessage(summary.cpu.broker) : null,
    },
    elapsedSeconds: Math.round(summary.elapsedS * 1000) / 1000,
    otherCores: brokerMeasured ? Math.round(summary.otherCores * 100) / 100 : null,
    prefetch: receiversPrefetch(received),
  };
}

function receiversPrefetch(received: readonly ReceiverResult[]): ScenarioFigures["prefetch"] {
  const asked = received.map((r) => r.prefetch.asked).filter((value) => value !== null);
  const granted = received.map((r) => r.prefetch.granted).filter((value) => value !== null);
  return {
    asked: asked.length === 0 ? null : Math.max(...asked),
    granted: granted.length === 0 ? null : Math.min(...granted),
  };
}
