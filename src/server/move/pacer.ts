/**
 * How fast a queue move streams its snapshot: `cluster.moveBytesPerSecond` while the clients'
 * traffic on the source and on the target keeps what it had before the move, and slower when
 * it falls, down to MIN_FACTOR of it. On hosts with cores to spare the move goes at full pace;
 * where the move's CPU comes out of the clients' share, it gives way (traffic.ts).
 *
 * Every TRAFFIC_WINDOW_MS the lowest of the two ratios (traffic now over traffic before) decides:
 * below PRESSURE the pace slows by 30%, above RELIEF it grows back by an eighth of the full pace, and
 * in between it holds. A fall that outlasts the slowest pace is taken for the clients' own
 * (REBASE_BELOW). The live stream (what the queue takes and settles meanwhile) is never held
 * back: only the snapshot waits.
 */
import { TRAFFIC_WINDOW_MS } from "./traffic.ts";

/** The slowest pace, as a share of `moveBytesPerSecond` (1/16: 640 KiB/s by default). */
export const MIN_FACTOR = 1 / 16;
/** Traffic below this share of what it was before the move: the move slows down. */
export const PRESSURE = 0.9;
/** Traffic above this share: the move speeds up again. */
export const RELIEF = 0.95;
/** What the pace is multiplied by in a window of pressure. */
const SLOWDOWN = 0.7;
/** What the pace grows back by per window, as a share of the full pace. */
const GROWTH = 1 / 8;
/**
 * A fall of the traffic under this share that lasts REBASE_MS while the move is at its slowest is
 * not the move's doing (at that pace it costs next to nothing; on a saturated host it costs
 * 10–17%): the clients slowed down on their own, and the traffic of then becomes the reference.
 */
export const REBASE_BELOW = 0.7;
export const REBASE_MS = 5_000;

export class MovePacer {
  #factor = 1;
  #adjustedAt = -Infinity;
  /** Since when the pace is at its slowest with a fall under REBASE_BELOW (null: it is not). */
  #lowSince: number | null = null;
  /**
   * Per side (source, target): what its ratio is divided by, once its clients slowed down on their
   * own.
   */
  readonly #references: number[] = [];

  /** The share of `moveBytesPerSecond` the snapshot streams at now. */
  get factor(): number {
    return this.#factor;
  }

  /**
   * Takes the ratios of the source and of the target (null: too little traffic to tell) at most
   * once per TRAFFIC_WINDOW_MS.
   */
  adjust(now: number, ratios: readonly (number | null)[]): void {
    if (now - this.#adjustedAt < TRAFFIC_WINDOW_MS) return;
    this.#adjustedAt = now;
    const scaled = ratios.map((ratio, side) => {
      const reference = this.#references[side] ?? 1;
      // A side whose clients stopped sending altogether has nothing left to protect: a move
      // takes a share of their traffic, never all of it (a burst just before the move, then none).
      return ratio === null || ratio === 0 ? null : ratio / reference;
    });
    let lowest = Infinity;
    for (const ratio of scaled) if (ratio !== null && ratio < lowest) lowest = ratio;
    if (this.#factor === MIN_FACTOR && lowest < REBASE_BELOW) {
      this.#lowSince ??= now;
      if (now - this.#lowSince >= REBASE_MS) return this.#rebase(ratios, scaled);
    } else {
      this.#lowSince = null;
    }
    if (lowest < PRESSURE) this.#factor = Math.max(MIN_FACTOR, this.#factor * SLOWDOWN);
    else if (lowest > RELIEF) this.#factor = Math.min(1, this.#factor + GROWTH);
  }

  /** The sides whose traffic fell on its own take their traffic now as the reference. */
  #rebase(ratios: readonly (number | null)[], scaled: readonly (number | null)[]): void {
    this.#lowSince = null;
    ratios.forEach((ratio, side) => {
      const now = scaled[side] ?? null;
      if (ratio !== null && now !== null && now < REBASE_BELOW) this.#references[side] = ratio;
    });
  }
}
