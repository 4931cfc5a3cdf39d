/**
 * Reads that take turns with the rest of the broker. Bun runs the next read of a socket that stays
 * readable before the event loop's timers: a stream of long reads (a peer writing megabytes again
 * after a relink, a flood of sends) held a master's timers for over a second, past the margin of
 * its etcd lease's renewals, and it stepped down. So after a read that took LONG_READ_MS or more,
 * the socket is not read again until the next turn of the event loop: timers and the other
 * connections run first. A read that short costs nothing more than two clock reads.
 */

/** A read that took this long (ms) lets the event loop turn before the next one. */
export const LONG_READ_MS = 20;

export interface Pausable {
  pause(): unknown;
  resume(): unknown;
}

export class ReadTurns {
  /** Paused by its owner (backpressure): a turn's end does not resume it. */
  #held = false;
  #yielding = false;

  constructor(readonly socket: Pausable) {}

  /** The owner stops reading (backpressure) until `resume`, whatever the turns do meanwhile. */
  pause(): void {
    this.#held = true;
    this.socket.pause();
  }

  resume(): void {
    this.#held = false;
    if (!this.#yielding) this.socket.resume();
  }

  /** A read that began at `startedAt` (`performance.now()`) ended: a long one yields the event loop. */
  after(startedAt: number): void {
    if (this.#yielding || performance.now() - startedAt < LONG_READ_MS) return;
    this.#yielding = true;
    if (!this.#held) this.socket.pause();
    setImmediate(() => {
      this.#yielding = false;
      if (!this.#held) this.socket.resume();
    });
  }
}
