/**
 * Broker-wide counters, real per-second rates, latency histograms, the event loop's lag, the
 * last 15 minutes (history.ts), and gauges other parts of the server add for /metrics.
 *
 * A rate is the counter's increase over the last `RATE_WINDOW_SECONDS`, divided by the seconds
 * actually covered (shorter just after start), sampled once a second by the broker's timer.
 */
import { COMMIT_BUCKETS, Histogram, LATENCY_BUCKETS, Sampler } from "./histogram.ts";
import { History } from "./history.ts";

export const RATE_WINDOW_SECONDS = 10;

/**
 * One message in this many gets its publish→confirm and send→deliver latency measured: a clock
 * read and a histogram bump for 1/64 of the messages, nothing for the rest.
 */
export const LATENCY_SAMPLE_EVERY = 64;

export interface BrokerCounters {
  /** Deliveries written to clients. */
  sent: number;
  /** Messages accepted into a queue. */
  received: number;
  /** Acknowledgements received (acks and nacks). */
  acked: number;
}

/** Label values by name, and the sample's value. */
export type GaugeSample = [labels: Record<string, string>, value: number];

/** A gauge (or a counter someone else keeps) read at each scrape of /metrics. */
export interface Gauge {
  /** `kitten_mq_…`, with its unit (`_seconds`, `_bytes`) when it has one; `_total` for a counter. */
  name: string;
  /** "gauge" unless said. */
  type?: "gauge" | "counter";
  help: string;
  read(): GaugeSample[];
}

export class Stats {
  readonly started: number;
  readonly counters: BrokerCounters = { sent: 0, received: 0, acked: 0 };
  /** From a send frame handled to its confirmation queued for writing (the commit included in fsync mode). */
  readonly publishConfirm = new Histogram(LATENCY_BUCKETS);
  /** From a message's arrival to its first delivery written (ms clock: 1 ms resolution). */
  readonly sendDeliver = new Histogram(LATENCY_BUCKETS);
  /** One store commit (transaction and fsync) of a group of messages. */
  readonly commit = new Histogram(COMMIT_BUCKETS);
  readonly publishSampler = new Sampler(LATENCY_SAMPLE_EVERY);
  readonly deliverSampler = new Sampler(LATENCY_SAMPLE_EVERY);
  /** Longest delay of the server's timer beyond its period during the last second (seconds). */
  eventLoopLag = 0;
  /** Largest timer delay (ms) seen since the last sample. */
  #lagMax = 0;
  readonly history: History;
  /**
   * Gauges added by other parts of the server (cluster lag, sync state…), by name: register one
   * with `addGauge` and /metrics lists it with no change to the admin code.
   */
  readonly gauges = new Map<string, Gauge>();
  #samples: { at: number; counters: BrokerCounters }[] = [];

  constructor(now: number) {
    this.started = now;
    this.history = new History(now);
    this.#samples.push({ at: now, counters: { ...this.counters } });
  }

  /** Adds (or replaces, by name) a gauge read at each scrape. */
  addGauge(gauge: Gauge): void {
    this.gauges.set(gauge.name, gauge);
  }

  /** Records the counters; called about once a second. */
  sample(now: number): void {
    this.#samples.push({ at: now, counters: { ...this.counters } });
    while (this.#samples.length > RATE_WINDOW_SECONDS + 1) this.#samples.shift();
    this.eventLoopLag = this.#lagMax / 1000;
    this.#lagMax = 0;
  }

  /** The timer fired `lateMs` after it was due: a busy loop delays every client alike. */
  noteTimerDelay(lateMs: number): void {
    if (lateMs > this.#lagMax) this.#lagMax = lateMs;
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
