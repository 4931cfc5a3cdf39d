/**
 * The broker's memory of the last 15 minutes, one point a second, broker-wide and per queue:
 * what the dashboard draws the moment it opens (GET /history), instead of starting empty.
 *
 * Counters are kept as per-second rates (the increase since the previous point divided by the
 * seconds actually elapsed, so a late timer does not make a spike), depths as they were. Values
 * are Float32 in fixed rings allocated once per scope: 900 points × 8 series × 4 bytes ≈ 29 KB
 * broker-wide and ≈ 25 KB per queue. Queues are created by whatever channel a client names, so
 * only the first `HISTORY_MAX_QUEUES` get a history: memory stays bounded (≈ 5 MB at most).
 */

/** 15 minutes at one point a second. */
export const HISTORY_POINTS = 900;
export const HISTORY_MAX_QUEUES = 200;

/** Broker-wide: rates of received, sent (deliveries) and acked; depths summed over queues; connections. */
export const BROKER_SERIES = ["received", "sent", "acked", "ready", "inflight", "delayed", "waiting", "connections"] as const;
/** Per queue: rates in (received), out (delivered) and acked; its depths. */
export const QUEUE_SERIES = ["received", "delivered", "acked", "ready", "inflight", "delayed", "waiting"] as const;
/** Which series are rates of a counter (the rest are levels). */
const RATES = new Set(["received", "sent", "acked", "delivered"]);

export interface HistoryView {
  /** Null for the broker-wide history. */
  queue: string | null;
  stepSeconds: 1;
  /** Sample times (ms since epoch), oldest first; every series has one value per time. */
  times: number[];
  series: Record<string, number[]>;
}

/** One scope's rings: a time ring and one value ring per series, written together. */
export class Track {
  readonly #names: readonly string[];
  readonly #times = new Float64Array(HISTORY_POINTS);
  readonly #values: Float32Array[];
  /** Counter values at the previous point: rates are differences from them. */
  readonly #previous: Float64Array;
  #head = 0;
  #size = 0;
  #lastAt: number;

  /** `startedAt`: when the counters were zero (the broker's start, the queue's creation). */
  constructor(names: readonly string[], startedAt: number) {
    this.#names = names;
    this.#values = names.map(() => new Float32Array(HISTORY_POINTS));
    this.#previous = new Float64Array(names.length);
    this.#lastAt = startedAt;
  }

  /** Appends a point: `values` in the order of the names, counters as their running totals. */
  record(now: number, values: readonly number[]): void {
    const seconds = (now - this.#lastAt) / 1000;
    if (seconds <= 0) return;
    const at = this.#head;
    this.#times[at] = now;
    for (let i = 0; i < this.#names.length; i++) {
      const value = values[i]!;
      if (RATES.has(this.#names[i]!)) {
        this.#values[i]![at] = Math.max(0, value - this.#previous[i]!) / seconds;
        this.#previous[i] = value;
      } else {
        this.#values[i]![at] = value;
      }
    }
    this.#head = (at + 1) % HISTORY_POINTS;
    this.#size = Math.min(this.#size + 1, HISTORY_POINTS);
    this.#lastAt = now;
  }

  get size(): number {
    return this.#size;
  }

  /** The latest value of a series (0 before the first point). */
  last(name: string): number {
    const i = this.#names.indexOf(name);
    if (i < 0 || this.#size === 0) return 0;
    return this.#values[i]![(this.#head - 1 + HISTORY_POINTS) % HISTORY_POINTS]!;
  }

  /** The points, oldest first. */
  view(queue: string | null): HistoryView {
    const first = (this.#head - this.#size + HISTORY_POINTS) % HISTORY_POINTS;
    const order = Array.from({ length: this.#size }, (_, i) => (first + i) % HISTORY_POINTS);
    const series: Record<string, number[]> = {};
    this.#names.forEach((name, i) => {
      const ring = this.#values[i]!;
      series[name] = order.map((at) => Math.round(ring[at]! * 100) / 100);
    });
    return { queue, stepSeconds: 1, times: order.map((at) => this.#times[at]!), series };
  }
}

/** What a point is read from; the broker and its queues fit it. */
export interface HistorySource {
  counters: { sent: number; received: number; acked: number };
  connections: number;
  queues: Iterable<{
    name: string;
    counters: { received: number; delivered: number; acked: number; nacked: number };
    depth(): { ready: number; inflight: number; delayed: number; waiting: number };
  }>;
}

export class History {
  readonly broker: Track;
  readonly #queues = new Map<string, Track>();

  constructor(startedAt: number) {
    this.broker = new Track(BROKER_SERIES, startedAt);
  }

  /** Called once a second by the server's timer. */
  record(now: number, source: HistorySource): void {
    const total = { ready: 0, inflight: 0, delayed: 0, waiting: 0 };
    for (const queue of source.queues) {
      const depth = queue.depth();
      total.ready += depth.ready;
      total.inflight += depth.inflight;
      total.delayed += depth.delayed;
      total.waiting += depth.waiting;
      const track = this.#track(queue.name, now);
      // Acks and nacks both answer a delivery: "acked" counts every answered copy, as broker-wide.
      const { received, delivered, acked, nacked } = queue.counters;
      track?.record(now, [received, delivered, acked + nacked, depth.ready, depth.inflight, depth.delayed, depth.waiting]);
    }
    const { received, sent, acked } = source.counters;
    this.broker.record(now, [received, sent, acked, total.ready, total.inflight, total.delayed, total.waiting, source.connections]);
  }

  /** Queues with a history. */
  get queuesTracked(): number {
    return this.#queues.size;
  }

  /** A queue's history; null for a queue with none (never seen, or past HISTORY_MAX_QUEUES). */
  queue(name: string): Track | null {
    return this.#queues.get(name) ?? null;
  }

  #track(name: string, now: number): Track | null {
    let track = this.#queues.get(name);
    if (track) return track;
    if (this.#queues.size >= HISTORY_MAX_QUEUES) return null;
    // A new queue's counters started at zero since the previous point: its first point counts all of it.
    track = new Track(QUEUE_SERIES, now - 1000);
    this.#queues.set(name, track);
    return track;
  }
}
