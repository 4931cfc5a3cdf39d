/**
 * What a queue move must leave room for: the clients' traffic on this broker, the sends it takes
 * per second (a move's own messages are not counted), sampled by the broker's tick in
 * TRAFFIC_WINDOW_MS windows. Sends, not deliveries: a consumer that lags behind a burst is no sign
 * of a move in the way, and the sends' rate is what a saturated broker loses first.
 *
 * A move compares the traffic of each window with what it was before the move began
 * (`TrafficBaseline`): on a host whose cores are all busy, the CPU a move takes comes out of the
 * clients' share, and their traffic falls; the source then slows the move down (pacer.ts).
 */

/** One sample of the traffic per window. */
export const TRAFFIC_WINDOW_MS = 250;
/** Windows kept: the traffic of the last 2 s before a move is its baseline. */
const HISTORY = 8;
/**
 * Below this many messages per second there is little traffic to protect, and a window holds too
 * few of them to tell a fall from noise: a move goes at full pace.
 */
export const MIN_TRAFFIC = 5_000;

export class TrafficMeter {
  readonly #rates = new Float64Array(HISTORY);
  #windows = 0;
  #at = -1;
  #total = 0;

  /** `total`: the clients' messages counted so far (only grows). */
  constructor(readonly total: () => number) {}

  /** Called by every tick; closes a window once TRAFFIC_WINDOW_MS have passed. */
  sample(now: number): void {
    if (this.#at < 0 || now < this.#at) {
      this.#at = now;
      this.#total = this.total();
      return;
    }
    const elapsed = now - this.#at;
    if (elapsed < TRAFFIC_WINDOW_MS) return;
    const total = this.total();
    this.#rates[this.#windows % HISTORY] = ((total - this.#total) * 1000) / elapsed;
    this.#windows++;
    this.#at = now;
    this.#total = total;
  }

  /** The rate of the last two windows, in messages per second (0 before the first): one window is noisier. */
  get current(): number {
    if (this.#windows < 2) return this.#windows === 0 ? 0 : this.#rates[0]!;
    return (this.#rates[(this.#windows - 1) % HISTORY]! + this.#rates[(this.#windows - 2) % HISTORY]!) / 2;
  }

  /**
   * The mean rate of the last HISTORY windows (2 s): the traffic before something begins. Windows
   * before the meter's first count as none (the broker took no sends then): a burst in a broker's
   * first half second is not taken for a steady rate four times as high.
   */
  mean(): number {
    let sum = 0;
    for (const rate of this.#rates) sum += rate;
    return sum / HISTORY;
  }
}

/**
 * The traffic before a move began, and how much of it is left now. The baseline stays what it
 * was: raised by a burst (a publisher catching up after a stall), it would take the steady rate
 * after it for a fall. Clients that slow down on their own meanwhile look like a fall too: the
 * move then goes at its slowest pace, and still ends.
 */
export class TrafficBaseline {
  readonly #baseline: number;

  constructor(readonly meter: TrafficMeter) {
    this.#baseline = meter.mean();
  }

  /** The traffic now (`current`) over the baseline (1: as before the move); null while there is too little traffic to tell. */
  ratio(): number | null {
    if (this.#baseline < MIN_TRAFFIC) return null;
    return this.meter.current / this.#baseline;
  }
}
