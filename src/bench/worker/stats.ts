/**
 * The clock, CPU counter and latency percentiles every benchmark process shares: the Kitten-MQ
 * bench workers and the bare relay's (scripts/bench/floor.ts). Imports nothing, so the floor's
 * processes do not load the Kitten-MQ client.
 */

export interface Latency {
  n: number;
  min: number;
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
  mean: number;
}

/**
 * Wall-clock based (shared by every process on the machine) with sub-millisecond precision:
 * a send is stamped in one process and received in another. `process.hrtime()` is per-process in Bun.
 */
export const now = (): number => performance.timeOrigin + performance.now();

/** Rounds to the microsecond (3 decimals of a millisecond). */
export const round = (value: number): number => Math.round(value * 1000) / 1000;

/** CPU this process has used since it started, to the microsecond (workers report it when ready and at the end). */
export function cpu(): { userMs: number; systemMs: number } {
  const usage = process.cpuUsage();
  return { userMs: round(usage.user / 1000), systemMs: round(usage.system / 1000) };
}

/**
 * Latency percentiles (ms) over the messages received (`seen[seq]`) with `skip <= seq < count`,
 * leaving out the warm-up; null when there is none.
 */
export function percentiles(latency: Float64Array, seen: Uint8Array, skip: number, count: number): Latency | null {
  const values: number[] = [];
  for (let seq = skip; seq < count; seq++) if (seen[seq]) values.push(latency[seq]!);
  if (values.length === 0) return null;
  const sorted = Float64Array.from(values).sort();
  const at = (q: number) => round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!);
  let sum = 0;
  for (const value of sorted) sum += value;
  return {
    n: sorted.length,
    min: round(sorted[0]!),
    p50: at(0.5),
    p90: at(0.9),
    p99: at(0.99),
    p999: at(0.999),
    max: round(sorted[sorted.length - 1]!),
    mean: round(sum / sorted.length),
  };
}

/** One latency per message (ms), by its seq, and which seqs have one: what `percentiles` reads. */
export class Latencies {
  readonly #ms: Float64Array;
  readonly #seen: Uint8Array;

  constructor(readonly count: number) {
    this.#ms = new Float64Array(count);
    this.#seen = new Uint8Array(count);
  }

  record(seq: number, ms: number): void {
    this.#ms[seq] = ms;
    this.#seen[seq] = 1;
  }

  /** Percentiles of the seqs from `skip` on (the warm-up left out). */
  percentiles(skip: number): Latency | null {
    return percentiles(this.#ms, this.#seen, skip, this.count);
  }
}
