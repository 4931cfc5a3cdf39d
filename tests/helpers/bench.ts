/**
 * Checks of `kitten-mq bench --json` (tests/cli/bench_command_test.ts, tests/ship/binary_test.ts):
 * the report's shape and figures, and whether any process still names a folder (what bench
 * starts names its temp folders on its command line, so none may be left once it exits).
 */
import { expect } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import type { BenchReport, ScenarioName } from "../../src/bench/mod.ts";

export interface Expected {
  count: number;
  listeners: number;
  scenarios: ScenarioName[];
  /** A broker bench started (its CPU measured), or one the test runs (not measured). */
  startedByBench: boolean;
  /** The prefetch the broker grants consumers and listeners (its `prefetch`, `listenerPrefetch`), when not 1,000. */
  grantedConsumer?: number;
  grantedListener?: number;
}

/** The report's shape, and every figure measured: rates > 0, percentiles in order, counts as sent. */
export function expectBenchReport(report: BenchReport, expected: Expected): void {
  expect(report.broker.startedByBench).toBe(expected.startedByBench);
  expect(report.broker.cpuMeasured).toBe(expected.startedByBench);
  expect(report.broker.hosts.length).toBeGreaterThan(0);
  expect(report.settings).toMatchObject({ count: expected.count, listeners: expected.listeners, size: 128, prefetch: 1000, warmupShare: 0.25 });
  expect(report.scenarios.map((s) => s.name)).toEqual(expected.scenarios);
  for (const s of report.scenarios) {
    const receivers = s.name === "fanout" ? expected.listeners : 1;
    expect(s.messages).toEqual({
      sent: expected.count,
      confirmed: expected.count,
      failed: 0,
      warmup: expected.count / 4,
      receivers,
      received: expected.count * receivers,
      duplicates: 0,
      bodyBytes: 128,
    });
    expect(s.rate.steady).toBeGreaterThan(0);
    expect(s.rate.wholeRun).toBeGreaterThan(0);
    expect(s.rate.deliveriesSteady).toBeGreaterThanOrEqual(s.rate.steady);
    const latency = s.latencyMs!;
    // Stamped and read in two processes on the wall clock, anchored once in each: a clock being
    // slewed meanwhile offsets them by a fraction of a millisecond, which can take a median of a
    // quarter millisecond below 0 (seen in CI). The slowest deliveries take far longer.
    expect(Number.isFinite(latency.p50)).toBe(true);
    expect(latency.max).toBeGreaterThan(0);
    expect(latency.p50).toBeLessThanOrEqual(latency.p90);
    expect(latency.p90).toBeLessThanOrEqual(latency.p99);
    expect(latency.p99).toBeLessThanOrEqual(latency.max);
    expect(s.latencyWholeRunMs!.max).toBeGreaterThanOrEqual(latency.max);
    expect(s.cpuUsPerMessage.publisher).toBeGreaterThan(0);
    expect(s.cpuUsPerMessage.receivers).toBeGreaterThan(0);
    if (expected.startedByBench) {
      // /proc counts the broker's CPU in 10 ms steps: a short run may show 0, never less.
      expect(s.cpuUsPerMessage.broker).toBeGreaterThanOrEqual(0);
      expect(s.otherCores).toBeGreaterThanOrEqual(0);
    } else {
      expect(s.cpuUsPerMessage.broker).toBeNull();
      expect(s.otherCores).toBeNull();
    }
    if (s.name === "latency") expect(s.rate.achieved).toBeGreaterThan(0);
    // Consumers ask 1,000 and are told what the broker grants; listeners ask none.
    if (s.name === "fanout") expect(s.prefetch).toEqual({ asked: null, granted: expected.grantedListener ?? 1000 });
    else expect(s.prefetch).toEqual({ asked: 1000, granted: expected.grantedConsumer ?? 1000 });
  }
}

/** Processes of this user whose command line contains `text`. */
export function processesMentioning(text: string): number[] {
  const uid = process.getuid?.();
  return readdirSync("/proc").filter((name) => /^\d+$/.test(name)).flatMap((pid) => {
    try {
      if (uid !== undefined && statSync(`/proc/${pid}`).uid !== uid) return [];
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(text) ? [Number(pid)] : [];
    } catch {
      return []; // gone meanwhile
    }
  });
}
