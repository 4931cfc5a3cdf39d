/**
 * The pure functions that decide the benchmark's verdicts: latency percentiles
 * (src/bench/worker/stats.ts), the median of the runs (scripts/bench/report.ts) and how one run's
 * reports become its figures (src/bench/results.ts). Hand-made inputs, hand-computed values.
 */
import { expect, test } from "bun:test";
import { median, medianOf } from "../../scripts/bench/report.ts";
import { type PublisherResult, type ReceiverResult, type Snapshot, summarize } from "../../src/bench/results.ts";
import { Latencies, percentiles } from "../../src/bench/worker/stats.ts";

test("percentiles() leaves out the messages not seen", () => {
  // seq 1 never arrived: its latency slot (1) must not count.
  const latency = Float64Array.from([5, 1, 3, 2, 4]);
  const seen = Uint8Array.from([1, 0, 1, 1, 1]);
  // Sorted: 2 3 4 5. p50 = sorted[floor(0.5 × 4)] = sorted[2]; p90, p99 = sorted[3].
  expect(percentiles(latency, seen, 0, 5)).toEqual({ n: 4, min: 2, p50: 4, p90: 5, p99: 5, p999: 5, max: 5, mean: 3.5 });
});

test("percentiles() skips the warm-up (seq < skip)", () => {
  const latency = Float64Array.from([100, 90, 3, 2, 4]);
  const seen = Uint8Array.from([1, 1, 1, 1, 1]);
  // seq 2–4 only: sorted 2 3 4.
  expect(percentiles(latency, seen, 2, 5)).toEqual({ n: 3, min: 2, p50: 3, p90: 4, p99: 4, p999: 4, max: 4, mean: 3 });
});

test("percentiles() returns null when no message after the warm-up was seen", () => {
  const latency = Float64Array.from([1, 2, 3]);
  expect(percentiles(latency, Uint8Array.from([0, 0, 0]), 0, 3)).toBeNull();
  expect(percentiles(latency, Uint8Array.from([1, 1, 0]), 2, 3)).toBeNull();
});

test("percentiles() sorts numerically and takes p99 at index floor(0.99 × n) for n = 500", () => {
  // Latencies 1..500 ms in a scrambled order (7 is prime to 500, so i × 7 mod 500 visits every slot).
  const latency = new Float64Array(500);
  for (let i = 0; i < 500; i++) latency[(i * 7) % 500] = i + 1;
  const result = percentiles(latency, new Uint8Array(500).fill(1), 0, 500);
  // Indexes 250, 450, 495, 499 of the sorted 1..500.
  expect(result).toEqual({ n: 500, min: 1, p50: 251, p90: 451, p99: 496, p999: 500, max: 500, mean: 250.5 });
});

test("percentiles() rounds to the microsecond", () => {
  const result = percentiles(Float64Array.from([1.23456]), Uint8Array.from([1]), 0, 1);
  expect(result?.p99).toBe(1.235);
});

test("median() takes the middle value of an odd count, in any order", () => {
  expect(median([3, 1, 2])).toBe(2);
  expect(median([7])).toBe(7);
  // Numeric order, not string order (10 < 9 as strings).
  expect(median([10, 9, 100])).toBe(10);
});

test("median() averages the two middle values of an even count", () => {
  expect(median([4, 1, 3, 2])).toBe(2.5);
  expect(median([10, 20])).toBe(15);
});

const latency = (p50: number, p99: number, max: number) => ({ n: 300, min: 0.1, p50, p90: p99, p99, p999: max, max, mean: p50 });

function receiver(overrides: Partial<ReceiverResult>): ReceiverResult {
  return {
    role: "listener",
    clientId: "l",
    expected: 400,
    received: 400,
    measured: 300,
    duplicates: 0,
    outOfRange: 0,
    errors: 0,
    firstAt: 1_100,
    lastAt: 4_000,
    latency: null,
    latencyWholeRun: null,
    cpu: { userMs: 0, systemMs: 0 },
    prefetch: { asked: null, granted: null },
    ...overrides,
  };
}

const PUBLISHED: PublisherResult = {
  role: "publisher",
  sent: 400,
  confirmed: 300,
  failed: 0,
  firstError: "",
  firstAt: 1_000,
  warmAt: 2_000,
  lastSendAt: 3_500,
  lastConfirmAt: 4_000,
  startCpu: { userMs: 100, systemMs: 0 },
  cpu: { userMs: 500, systemMs: 100 },
};

const BEFORE: Snapshot = {
  at: 1_000,
  machine: 100,
  self: { user: 1, system: 0 },
  broker: { user: 1, system: 0.5 },
  brokers: [{ user: 1, system: 0.5 }],
  receivers: [{ user: 0.1, system: 0 }, { user: 0.1, system: 0 }],
};

const AFTER: Snapshot = {
  at: 7_000,
  machine: 110,
  self: { user: 1.5, system: 0 },
  broker: { user: 3, system: 1 },
  brokers: [{ user: 3, system: 1 }],
  receivers: [],
};

const RECEIVED = [
  receiver({
    clientId: "l1",
    lastAt: 4_000,
    latency: latency(1, 5, 9),
    latencyWholeRun: latency(1, 7, 9),
    cpu: { userMs: 300, systemMs: 100 },
  }),
  receiver({ clientId: "l2", lastAt: 5_000, latency: latency(2, 4, 12), cpu: { userMs: 200, systemMs: 0 } }),
];

test("summarize() counts only the messages after the warm-up, over lastAt - warmAt", () => {
  const result = summarize(PUBLISHED, RECEIVED, BEFORE, AFTER);
  // 300 + 300 measured, from the first send after the warm-up (2,000) to the last delivery of
  // any receiver (5,000): 600 / 3 s. Not 800 received, and not over the whole 4 s.
  expect(result.rate).toBe(200);
  expect(result.deliveries).toBe(800);
  expect(result.elapsedS).toBe(4);
  // 300 confirmed from the first send (1,000) to the last confirmation (4,000).
  expect(result.confirmRate).toBe(100);
  // The whole run, warm-up included, goes in the note: 800 / 4 s, the listeners' worst whole-run p99.
  expect(result.note).toBe("whole run 200/s, p99 7.00 ms");
});

test("summarize() reports the worst listener's percentiles", () => {
  const result = summarize(PUBLISHED, RECEIVED, BEFORE, AFTER);
  // l1: p50 1, p99 5, max 9; l2: p50 2, p99 4, max 12. Each column is the worse of the two.
  expect(result.p50).toBe(2);
  expect(result.p99).toBe(5);
  expect(result.max).toBe(12);
});

test("summarize() counts CPU while messages flowed and the cores other processes kept busy", () => {
  const result = summarize(PUBLISHED, RECEIVED, BEFORE, AFTER);
  expect(result.cpu.broker).toEqual({ user: 2, system: 0.5 });
  // The publisher's CPU before its first send (startCpu) is left out: 0.5 - 0.1, 0.1 - 0.
  expect(result.cpu.publisher.user).toBeCloseTo(0.4, 9);
  expect(result.cpu.publisher.system).toBeCloseTo(0.1, 9);
  // (0.3 - 0.1) + (0.2 - 0.1) user, (0.1 - 0) + (0 - 0) system.
  expect(result.cpu.receivers.user).toBeCloseTo(0.3, 9);
  expect(result.cpu.receivers.system).toBeCloseTo(0.1, 9);
  // Machine 10 s busy, ours 2.5 + 0.4 + 0.6 (publisher, start-up included) + 0.5 (this process) = 4,
  // over 6 s of wall time: 1 core.
  expect(result.otherCores).toBeCloseTo(1, 9);
});

test("Latencies gives the percentiles of the seqs it recorded, from the warm-up's end on", () => {
  const times = new Latencies(5);
  times.record(0, 100); // warm-up
  times.record(2, 3);
  times.record(3, 1);
  times.record(4, 2); // seq 1 never confirmed
  expect(times.percentiles(1)).toEqual({ n: 3, min: 1, p50: 2, p90: 3, p99: 3, p999: 3, max: 3, mean: 2 });
  expect(new Latencies(3).percentiles(0)).toBeNull();
});

test("summarize() takes the send → confirm p99 from the publisher (null when it did not time confirmations), and the median keeps null unless every run has one", () => {
  const timed = summarize({ ...PUBLISHED, confirmLatency: { p50: 0.9, p99: 6.5 } }, RECEIVED, BEFORE, AFTER);
  const untimed = summarize(PUBLISHED, RECEIVED, BEFORE, AFTER);
  expect(timed.confirmP99).toBe(6.5);
  expect(untimed.confirmP99).toBeNull();
  const other = { ...timed, confirmP99: 8 };
  expect(medianOf([timed, other, { ...timed, confirmP99: 7 }]).confirmP99).toBe(7);
  expect(medianOf([timed, untimed]).confirmP99).toBeNull();
});

test("summarize() notes the send → confirm p99 of the whole run beside the steady state's, when the publisher gives it", () => {
  const steady = { p50: 0.6, p99: 2.7 };
  const paced = summarize({ ...PUBLISHED, confirmLatency: steady, confirmLatencyWholeRun: { p50: 0.6, p99: 4.8 } }, RECEIVED, BEFORE, AFTER);
  expect(paced.confirmP99).toBe(2.7); // the headline stays the steady state's
  expect(paced.note).toContain("confirm p50 0.6 ms p99 2.7 ms (whole run p99 4.8 ms)");
  const alone = summarize({ ...PUBLISHED, confirmLatency: steady }, RECEIVED, BEFORE, AFTER);
  expect(alone.note).toContain("confirm p50 0.6 ms p99 2.7 ms");
  expect(alone.note).not.toContain("whole run p99 4.8");
});
