/**
 * Latency histograms for the Prometheus exposition, cheap enough for the message path.
 *
 * Fixed bucket bounds (seconds) chosen once; `observe` walks at most a dozen bounds of a
 * Float64Array and bumps one slot (non-cumulative counts: the cumulative sums Prometheus wants
 * are built at scrape time, not per message). The message path samples: `Sampler.hit()` is one
 * decrement and compare, so most messages pay nothing more, and the sampled ones pay one clock read.
 */

/** 100 µs to 10 s: loopback confirms are sub-millisecond, a stuck queue is seconds. */
export const LATENCY_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** A commit of a group of messages, fsync included: about 0.4 ms p50 here, checkpoints 10–20 ms. */
export const COMMIT_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

export class Histogram {
  readonly bounds: Float64Array;
  /** counts[i]: observations in (bounds[i-1], bounds[i]]; the last slot is above every bound. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(bounds: readonly number[]) {
    this.bounds = Float64Array.from(bounds);
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(seconds: number): void {
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && seconds > bounds[i]!) i++;
    this.counts[i]!++;
    this.sum += seconds;
    this.count++;
  }

  /** `[upper bound, cumulative count]` pairs, `+Inf` last, as the exposition lists buckets. */
  cumulative(): [bound: number, count: number][] {
    const out: [number, number][] = [];
    let running = 0;
    for (let i = 0; i < this.bounds.length; i++) {
      running += this.counts[i]!;
      out.push([this.bounds[i]!, running]);
    }
    out.push([Infinity, running + this.counts[this.bounds.length]!]);
    return out;
  }

  /** The bucket bound under which `q` (0–1) of the observations fall (0 with none). */
  quantile(q: number): number {
    if (this.count === 0) return 0;
    const target = q * this.count;
    for (const [bound, running] of this.cumulative()) if (running >= target) return bound;
    return Infinity;
  }
}

/** Says yes once every `every` calls: which messages get a latency measurement. */
export class Sampler {
  #left: number;

  constructor(readonly every: number) {
    this.#left = 1; // the first message is measured: a quiet broker still shows a figure
  }

  hit(): boolean {
    if (--this.#left !== 0) return false;
    this.#left = this.every;
    return true;
  }
}
