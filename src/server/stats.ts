/**
 * Broker-wide counters and real per-second rates.
 *
 * The original's `*_per_seconds_average` was a running mean of the value 1 (always 0 or 1).
 * Here a rate is the counter's increase over the last `RATE_WINDOW_SECONDS`, divided by the
 * seconds actually covered, sampled once a second by the broker's timer.
 */
export const RATE_WINDOW_SECONDS = 10;

export interface BrokerCounters {
  /** Deliveries written to clients. */
  sent: number;
  /** Messages accepted into a queue. */
  received: number;
  /** Acknowledgements received (acks and nacks). */
  acked: number;
}

export class Stats {
  readonly started: number;
  readonly counters: BrokerCounters = { sent: 0, received: 0, acked: 0 };
  #samples: { at: number; counters: BrokerCounters }[] = [];

  constructor(now: number) {
    this.started = now;
    this.#samples.push({ at: now, counters: { ...this.counters } });
  }

  /** Records the counters; called about once a second. */
  sample(now: number): void {
    this.#samples.push({ at: now, counters: { ...this.counters } });
    while (this.#samples.length > RATE_WINDOW_SECONDS + 1) this.#samples.shift();
  }

  /** Events per second of one counter over the sampling window (0 before two samples exist). */
  rate(name: keyof BrokerCounters, now: number): number {
    const oldest = this.#samples[0]!;
    const seconds = (now - oldest.at) / 1000;
    if (seconds <= 0) return 0;
    return (this.counters[name] - oldest.counters[name]) / seconds;
  }

  uptimeSeconds(now: number): number {
    return (now - this.started) / 1000;
  }
}
