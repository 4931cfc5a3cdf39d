/**
 * The sends a client waits to see confirmed, in call order. A send stays here through reconnects
 * and through the refusals that waiting fixes (the catalogue's `resend`: NOT_ENOUGH_REPLICAS while
 * a slave catches up, STOPPING). It leaves when the master confirms it, refuses it with any other
 * code, or `sendTimeoutMs` after the call, with TIMEOUT naming why no master confirmed it (none
 * connected, or the last refusal).
 *
 * What the master refuses now it refuses for every send, so a refusal holds back the client, not
 * one send: the refused sends wait, and so do the sends made meanwhile. After a backoff (50 ms,
 * doubling with each round of refusals up to 1 s, with jitter so that clients spread out), the
 * oldest waiting send goes again alone, as a probe. Refused, another round begins; once the
 * master confirms a send, every waiting send goes out, in call order. One send per round while
 * the master refuses, however many wait, and the queue order stays the order of the calls. A
 * send goes again as the same frame, so with the same message id: a broker that already took it
 * drops the duplicate. A new link gets every pending send at once (`replay`); a link to a master
 * ends the hold.
 *
 * Two timers serve every send (the backoff, the next deadline), and neither keeps the process
 * alive: they are unref'd, from node:timers, which Bun, Deno and Node all provide.
 */
import { clearTimeout, setTimeout } from "node:timers";
import { KittenError } from "../protocol/mod.ts";

export interface PendingSend {
  readonly ref: number;
  readonly channel: string;
  /**
   * The whole SEND frame (length prefix included), encoded once and written to every broker that
   * takes copies: a view of a buffer shared with the sends made next to it, until it is refused.
   */
  frame: Uint8Array;
  readonly timeoutMs: number;
  /** performance.now() past which the send fails with TIMEOUT. */
  readonly deadline: number;
  /** False while it is held back, made while the master refused: no broker was sent it yet. */
  written: boolean;
  /** Held back until the master confirms again: refused for now, or made meanwhile. */
  waiting: boolean;
  /** How many times a broker refused it with a code that waiting fixes. */
  refusals: number;
  /** The last such refusal (for a send held back, the client's last one): TIMEOUT and CLOSED name it. */
  refusal: KittenError | null;
  resolve(): void;
  reject(error: KittenError): void;
}

export interface PendingSendsEvents {
  /** Writes a send to every broker that takes copies (a new one, or one held back). */
  write(send: PendingSend): void;
  /** Writes a refused send again, to the brokers whose confirmation counts (the master). */
  resend(send: PendingSend): void;
  /** Why no broker can confirm a send to `channel` now (no link, no master), or null. */
  whyNoMaster(channel: string): KittenError | null;
}

const FIRST_RESEND_MS = 50;
const MAX_RESEND_MS = 1_000;
/** setTimeout fires at once for a longer delay: a later deadline is reached in several waits. */
const MAX_TIMER_MS = 2 ** 31 - 1;

type Timer = ReturnType<typeof setTimeout>;

export class PendingSends {
  /** By ref, in call order: what a new link is sent, first to last, and the order sends go again. */
  readonly #sends = new Map<number, PendingSend>();
  /** Runs while the client backs off; at its end, the probe goes. */
  #backoff: Timer | null = null;
  /** The oldest waiting send when the backoff ended, sent again alone to learn whether the master confirms again. */
  #probe: PendingSend | null = null;
  /** Rounds of refusals since the master last confirmed a send: the backoff doubles with each. */
  #rounds = 0;
  #lastRefusal: KittenError | null = null;
  /** Runs until the earliest deadline armed (it may outlive the send that armed it: it then finds nothing due). */
  #deadlineTimer: Timer | null = null;
  #deadlineAt = Infinity;

  constructor(readonly events: PendingSendsEvents) {}

  /** Sends not yet settled, those waiting to go again included: what maxPendingMessages bounds. */
  get size(): number {
    return this.#sends.size;
  }

  get(ref: number): PendingSend | undefined {
    return this.#sends.get(ref);
  }

  /** True from a refusal until the master confirms again: new sends wait with the refused ones. */
  get #holding(): boolean {
    return this.#backoff !== null || this.#probe !== null;
  }

  /** Keeps a send until it is settled, and writes it (`write`) unless the client holds back. */
  add(ref: number, channel: string, frame: Uint8Array, timeoutMs: number): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const deadline = performance.now() + timeoutMs;
      const held = this.#holding;
      const refusal = held ? this.#lastRefusal : null;
      const send: PendingSend = { ref, channel, frame, timeoutMs, deadline, written: !held, waiting: held, refusals: 0, refusal, resolve, reject };
      this.#sends.set(ref, send);
      this.#armDeadline(deadline);
      if (!held) this.events.write(send);
    });
  }

  /**
   * A new link: `write` is given every pending send, in call order, and each counts as written
   * (one held back, once released, goes to the master only). On a link to a master (`toMaster`:
   * a new link, or a slave promoted) the hold ends, as at a confirmation: that master just got
   * every send, so none waits, no probe is out, and the backoff starts over at its first round.
   * A slave's new link leaves the hold on the master as it is. `write` may fail a send (`fail`).
   */
  replay(write: (send: PendingSend) => void, { toMaster }: { toMaster: boolean }): void {
    if (toMaster) this.#endHold();
    for (const send of this.#sends.values()) {
      if (toMaster) send.waiting = false;
      send.written = true;
      write(send);
    }
  }

  /** The master confirmed it: it confirms again, so every waiting send goes out now. */
  confirm(send: PendingSend): void {
    this.#forget(send);
    this.#release();
    send.resolve();
  }

  /** Refused for good (or never sendable): the caller's promise rejects with `error`. */
  fail(send: PendingSend, error: KittenError): void {
    this.#forget(send);
    // The probe had an answer that says nothing of the other sends: they go out.
    if (send === this.#probe) this.#release();
    send.reject(error);
  }

  /** Refused with a code that waiting fixes: it waits, and a round of backoff begins unless one runs. */
  refused(send: PendingSend, error: KittenError): void {
    // It may wait long while the sends around it are settled: a copy of its own, so that it does
    // not keep their buffer alive.
    if (send.refusals === 0) send.frame = send.frame.slice();
    send.refusal = this.#lastRefusal = error;
    send.refusals++;
    send.waiting = true;
    if (send === this.#probe) this.#probe = null;
    if (!this.#backoff) this.#startBackoff();
  }

  /** Why a send is not confirmed yet: no master to confirm it now, or else its last refusal (or null). */
  whyWaiting(send: PendingSend): KittenError | null {
    return this.events.whyNoMaster(send.channel) ?? send.refusal;
  }

  /** Rejects every send (disconnect(), every host refused) with the error made for it; stops the timers. */
  /**
   * Gives up the sends `matches` selects that are held back (refused, or made while the master
   * refused: none of them is stored), each rejected with `errorFor(send)`: the caller sends them
   * elsewhere (their queue moved to another group).
   */
  releaseHeld(matches: (send: PendingSend) => boolean, errorFor: (send: PendingSend) => KittenError): void {
    for (const send of [...this.#sends.values()]) if (send.waiting && matches(send)) this.fail(send, errorFor(send));
  }

  rejectAll(errorFor: (send: PendingSend) => KittenError): void {
    const sends = [...this.#sends.values()];
    const errors = sends.map(errorFor);
    this.#sends.clear();
    this.#endHold();
    this.#lastRefusal = null;
    if (this.#deadlineTimer) clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = null;
    this.#deadlineAt = Infinity;
    sends.forEach((send, i) => send.reject(errors[i]!));
  }

  /**
   * Drops a settled send. With none left, the backoff has nothing to probe and stops; the deadline
   * timer runs on (with sends confirmed as they come, the next one would arm it again).
   */
  #forget(send: PendingSend): void {
    this.#sends.delete(send.ref);
    if (this.#sends.size === 0 && this.#backoff) {
      clearTimeout(this.#backoff);
      this.#backoff = null;
    }
  }

  #startBackoff(): void {
    const base = Math.min(FIRST_RESEND_MS * 2 ** this.#rounds, MAX_RESEND_MS);
    this.#rounds++;
    // Jitter: the clients of one failover do not come back at the same moments.
    this.#backoff = setTimeout(() => this.#sendProbe(), base / 2 + Math.random() * (base / 2));
    this.#backoff.unref();
  }

  /** The end of a round: the oldest waiting send goes again, alone. */
  #sendProbe(): void {
    this.#backoff = null;
    for (const send of this.#sends.values()) {
      if (!send.waiting) continue;
      send.waiting = false;
      this.#probe = send;
      return this.#writeAgain(send);
    }
  }

  /** The master confirms again: the hold ends, and every waiting send goes out, in call order. */
  #release(): void {
    if (!this.#holding) {
      this.#rounds = 0;
      return;
    }
    this.#endHold();
    for (const send of this.#sends.values()) {
      if (!send.waiting) continue;
      send.waiting = false;
      this.#writeAgain(send);
    }
  }

  /** No probe out, no backoff, and the next refusal starts the first round. */
  #endHold(): void {
    this.#rounds = 0;
    this.#probe = null;
    if (this.#backoff) clearTimeout(this.#backoff);
    this.#backoff = null;
  }

  /** A refused send to the master again; one held back is written (`write`) for the first time. */
  #writeAgain(send: PendingSend): void {
    if (send.written) return this.events.resend(send);
    send.written = true;
    this.events.write(send);
  }

  #armDeadline(at: number): void {
    if (at >= this.#deadlineAt) return;
    if (this.#deadlineTimer) clearTimeout(this.#deadlineTimer);
    this.#deadlineAt = at;
    this.#deadlineTimer = setTimeout(() => this.#expireDue(), Math.min(MAX_TIMER_MS, Math.max(0, at - performance.now())));
    this.#deadlineTimer.unref();
  }

  /**
   * Rejects every send past its deadline. One scan per deadline reached: with sends confirmed as
   * they come, that is about one scan per `sendTimeoutMs`.
   */
  #expireDue(): void {
    this.#deadlineTimer = null;
    this.#deadlineAt = Infinity;
    const now = performance.now();
    let next = Infinity;
    let probeExpired = false;
    let waiting = false;
    for (const send of this.#sends.values()) {
      if (send.deadline > now) {
        next = Math.min(next, send.deadline);
        waiting ||= send.waiting;
        continue;
      }
      this.#forget(send);
      if (send === this.#probe) {
        this.#probe = null;
        probeExpired = true;
      }
      send.reject(this.#timeout(send));
    }
    // A probe that timed out had no answer: the next round probes with the next oldest.
    if (probeExpired && waiting && !this.#backoff) this.#startBackoff();
    if (next !== Infinity) this.#armDeadline(next);
  }

  /** TIMEOUT, naming what stops the send now (no link, no master) or else its last refusal. */
  #timeout(send: PendingSend): KittenError {
    const why = this.whyWaiting(send);
    const waited = `Cannot send to "${send.channel}": not confirmed within sendTimeoutMs (${send.timeoutMs} ms)`;
    const message = why
      ? `${waited}; the last refusal was ${why.code}: ${why.message}`
      : `${waited}; the master neither confirmed nor refused it`;
    return new KittenError("TIMEOUT", message, { refusal: why?.code ?? null, refusals: send.refusals }, why ? { cause: why } : undefined);
  }
}
