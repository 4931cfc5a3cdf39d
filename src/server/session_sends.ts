/**
 * A session's SEND frames: read in place, handed to the broker, and confirmed once what the
 * broker returned settles (the commit that holds the message, and its replicas). The sends of one
 * commit share one promise, so they are confirmed by one reaction, not one per message.
 */
import { checkSend, readSend, refOf } from "../protocol/mod.ts";
import type { Broker } from "./broker.ts";
import { decodeFrame } from "./handshake.ts";
import type { Sender } from "./admission.ts";
import { SharedSettlement } from "./shared_settlement.ts";

export interface SendsHost {
  confirm(ref: number): void;
  fail(ref: number | null, error: unknown): void;
  /** Ends an asynchronous step: its answers are written, a throw is logged. */
  afterwards(step: Promise<unknown>): void;
}

export class SessionSends {
  readonly #broker: Broker;
  readonly #sender: Sender;
  readonly #host: SendsHost;
  readonly #waiting: SharedSettlement<number>;
  /** The outcome of the group the last send joined: a new group's is handed to `afterwards` once. */
  #outcome: Promise<void> | null = null;

  constructor(broker: Broker, sender: Sender, host: SendsHost) {
    this.#broker = broker;
    this.#sender = sender;
    this.#host = host;
    this.#waiting = new SharedSettlement<number>(
      (refs) => refs.forEach((ref) => host.confirm(ref)),
      (refs, error) => refs.forEach((ref) => host.fail(ref, error)),
      false,
    );
  }

  /**
   * A SEND frame: the hand-written reader (hot_ops.ts) takes what `writeSend` writes; the generic
   * decoder reads another encoder's choices, and names what is wrong with a frame it refuses.
   */
  handle(data: Uint8Array, start: number, end: number): void {
    const send = readSend(data, start, end);
    if (send !== undefined) {
      try {
        return this.#send(send.ref, send.channel, send.messageId, send.body);
      } catch (error) {
        return this.#host.fail(send.ref, error);
      }
    }
    let value: unknown[] | null = null;
    try {
      value = decodeFrame(data, start, end);
      const [, ref, channel, messageId, body] = checkSend(value);
      this.#send(ref, channel, messageId, body);
    } catch (error) {
      this.#host.fail(Array.isArray(value) ? refOf(value) : null, error);
    }
  }

  #send(ref: number, channel: string, messageId: string, body: Uint8Array): void {
    const stats = this.#broker.stats;
    // One send in LATENCY_SAMPLE_EVERY is timed; the others pay one decrement.
    const started = stats.publishSampler.hit() ? performance.now() : -1;
    const stored = this.#broker.send(channel, messageId, body, this.#sender);
    if (stored === undefined) return this.#confirm(ref, started);
    if (started >= 0) {
      return this.#host.afterwards(stored.then(() => this.#confirm(ref, started), (error) => this.#host.fail(ref, error)));
    }
    const outcome = this.#waiting.add(stored, ref);
    if (outcome !== this.#outcome) this.#host.afterwards((this.#outcome = outcome));
  }

  /** Confirms a send; a timed one (`started` ≥ 0) records its publish → confirm latency. */
  #confirm(ref: number, started: number): void {
    this.#host.confirm(ref);
    if (started >= 0) this.#broker.stats.publishConfirm.observe((performance.now() - started) / 1000);
  }
}
