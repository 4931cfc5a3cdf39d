/**
 * One link to one broker: dial, hello/welcome, frame decoding, batched writes, and a reconnect
 * loop with backoff. It knows nothing of sends or subscriptions: the client drives it.
 */
import {
  type Challenge,
  decode,
  type DeliverFields,
  readDeliver,
  encode,
  frame,
  FrameBatch,
  FrameDecoder,
  type HelloOptions,
  isErrorCode,
  isFatal,
  isRetryable,
  KittenError,
  OP,
  deliverFields,
  opOf,
  peekOp,
  type WelcomeInfo,
} from "../protocol/mod.ts";
import { PROTOCOL_VERSION } from "../version.ts";
import type { ClientOptions, Host } from "./options.ts";
import type { Dial, Transport } from "./transport.ts";

export interface ConnectionEvents {
  /** The broker accepted the client: (re)register and resend. */
  open(connection: HostConnection): void;
  /**
   * The link dropped (`wasOpen`) or could not be made; a reconnect is scheduled unless stopped.
   */
  close(connection: HostConnection, error: Error | null, wasOpen: boolean): void;
  /** The broker refused the client (token, key, protocol): not retried. */
  refused(connection: HostConnection, error: KittenError): void;
  /** Any frame after welcome. */
  frame(connection: HostConnection, value: unknown[]): void;
  /** A DELIVER frame (read by the fast reader, or decoded generically by the client). */
  deliver(connection: HostConnection, delivery: DeliverFields): void;
  /** One of the calls above threw while handling a frame (a user handler or listener, a bug). */
  error(connection: HostConnection, error: unknown): void;
}

export class HostConnection {
  state: "idle" | "connecting" | "open" | "stopped" = "idle";
  welcome: WelcomeInfo | null = null;
  /** Increments at every successful handshake: a delivery's done() is ignored after a reconnect. */
  generation = 0;
  /** The highest send ref this broker confirmed storing as a slave (see Client #catchUp). */
  storedUpTo = 0;
  /**
   * What this broker last said (welcome, ROLE), kept while the link is down: it takes its
   * master's replication stream, so as a slave it needs no copies of this client's sends and acks.
   */
  replicates = false;
  #transport: Transport | null = null;
  /** Drops a link whose handshake does not complete in time (see #dial). */
  #handshakeTimer: ReturnType<typeof setTimeout> | undefined;
  readonly #batch = new FrameBatch(16 * 1024);
  /** Acks per subscription, sent together at the next flush. */
  #acks = new Map<number, number[]>();
  /** Acks copied to this broker as a slave, by `kind|queue`: [destination, messageId, …]. */
  #mirrors = new Map<string, string[]>();
  #flushScheduled = false;
  #attempt = 0;
  #retryTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    readonly host: Host,
    readonly options: ClientOptions,
    readonly events: ConnectionEvents,
    readonly dial: Dial,
    /** Answers a broker's challenge with the AUTH operation (signs its nonce with the client key). */
    readonly prove: (host: Host, challenge: Challenge) => Promise<unknown[]>,
  ) {}

  get isOpen(): boolean {
    return this.state === "open";
  }

  start(): void {
    if (this.state !== "idle") return;
    this.#dial();
  }

  /** Closes for good: no reconnect. */
  stop(): void {
    this.state = "stopped";
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    clearTimeout(this.#handshakeTimer);
    this.#flush();
    this.#transport?.close();
    this.#transport = null;
  }

  /** Queues one operation; everything queued in the same tick leaves in one write. */
  send(op: unknown[]): void {
    if (this.state !== "open") return;
    this.#batch.push(encode(op));
    this.#scheduleFlush();
  }

  /** Queues a frame already encoded with its length prefix (a send is encoded once for every broker). */
  sendFramed(frame: Uint8Array): void {
    if (this.state !== "open") return;
    this.#batch.pushFramed(frame);
    this.#scheduleFlush();
  }

  /** The largest frame body this broker accepts (known after welcome). */
  get maxFrameSize(): number {
    return this.welcome?.maxFrameSize ?? Infinity;
  }

  /**
   * True while this broker wants the client's sends and acks copied to it: a master, or a slave
   * that takes no replication stream (no `cluster.peers`: the client's copies are all it gets).
   */
  get takesCopies(): boolean {
    return !this.replicates || this.welcome?.role !== "slave";
  }

  /** This broker's current role (welcome, then ROLE updates). */
  get role(): "master" | "slave" | null {
    return this.welcome?.role ?? null;
  }

  /** Copies an ack made on the master, so this broker (a slave) drops the same copy. */
  mirror(kind: 0 | 1, queue: string, destination: string, messageId: string): void {
    if (this.state !== "open") return;
    const key = `${kind}|${queue}`;
    const pairs = this.#mirrors.get(key);
    if (pairs) pairs.push(destination, messageId);
    else this.#mirrors.set(key, [destination, messageId]);
    this.#scheduleFlush();
  }

  ack(sub: number, tag: number): void {
    if (this.state !== "open") return;
    const tags = this.#acks.get(sub);
    if (tags) tags.push(tag);
    else this.#acks.set(sub, [tag]);
    this.#scheduleFlush();
  }

  #dial(): void {
    this.state = "connecting";
    const decoder = new FrameDecoder(this.options.maxFrameSize);
    // One frame: false once the link is gone (closed here, or by a handler).
    const visit = (data: Uint8Array, start: number, end: number): boolean => {
      // Deliveries take the hand-written reader, in place; what it does not expect (another
      // encoder's choices, fields a newer broker adds) and every other frame, the generic decoder.
      // A broker that sends garbage is reconnected to.
      const isDelivery = this.state === "open" && peekOp(data, start, end) === OP.DELIVER;
      let delivery = isDelivery ? readDeliver(data, start, end) : undefined;
      let value: unknown[] | undefined;
      try {
        if (!delivery) opOf(value = decode(data.subarray(start, end)) as unknown[]);
        if (isDelivery && !delivery && !(delivery = deliverFields(value!))) return this.#refuseFrame(transport);
      } catch {
        return this.#refuseFrame(transport);
      }
      // What a frame triggers runs the client's code and, through it, the user's (handlers,
      // listeners). A throw is reported here: thrown into the socket's callback, it would cut off
      // the chunk's other frames.
      try {
        if (delivery) this.events.deliver(this, delivery);
        else if (this.state === "open") this.events.frame(this, value!);
        else if (!this.#handshake(transport, value!)) return false;
      } catch (error) {
        this.events.error(this, error);
      }
      return this.#transport === transport;
    };
    let transport: Transport;
    try {
      transport = this.dial(this.host.host, this.host.port, this.options.tls, {
        open: () => {
          const hello: HelloOptions = { client: this.options.clientId, token: this.host.token };
          transport.write(frame(encode([OP.HELLO, PROTOCOL_VERSION, hello])));
        },
        data: (chunk) => {
          if (this.#transport !== transport) return;
          try {
            decoder.each(chunk, visit);
          } catch {
            // The visitor throws nothing: this is the decoder's FRAME_TOO_LARGE, after which the
            // stream cannot be read on. A broker that sends an oversized frame is reconnected to.
            transport.close();
          }
        },
        close: (error) => {
          if (this.#transport !== transport) return;
          clearTimeout(this.#handshakeTimer);
          this.#transport = null;
          this.welcome = null;
          const wasOpen = this.state === "open";
          const wasStopped = this.state === "stopped";
          if (!wasStopped) this.state = "connecting";
          this.#batch.take();
          this.#acks.clear();
          this.#mirrors.clear();
          this.events.close(this, error, wasOpen);
          if (!wasStopped) this.#scheduleReconnect();
        },
      });
    } catch (error) {
      // Options the runtime refuses at once (a `tls.ca` that is not a certificate, for one) would
      // be refused again at every attempt: the host is refused, like a wrong token.
      this.stop();
      const message = `Cannot connect to "${this.host.label}": ${error instanceof Error ? error.message : String(error)}`;
      this.events.refused(this, new KittenError("CONFIG_INVALID", message, undefined, { cause: error }));
      return;
    }
    this.#transport = transport;
    // A host that accepts the connection but never completes the handshake (hung, or not a
    // Kitten-MQ broker) is dropped and retried like a refused connection.
    this.#handshakeTimer = setTimeout(() => {
      if (this.#transport === transport) transport.close();
    }, this.options.handshakeTimeoutMs);
  }

  /**
   * Handles a handshake frame: a challenge is answered, welcome opens the link, an error refuses
   * it. False when the link is gone.
   */
  /** A frame that cannot be read: the broker is reconnected to. False: the link is gone. */
  #refuseFrame(transport: Transport): false {
    transport.close();
    return false;
  }

  #handshake(transport: Transport, value: unknown[]): boolean {
    if (value[0] === OP.CHALLENGE && typeof value[1] === "object" && value[1] !== null) {
      this.prove(this.host, value[1] as Challenge).then(
        (op) => {
          if (this.#transport === transport) transport.write(frame(encode(op)));
        },
        (error: KittenError) => {
          if (this.#transport !== transport) return; // a proof for a link that is gone
          this.stop();
          this.events.refused(this, error);
        },
      );
      return true;
    }
    if (value[0] === OP.WELCOME && typeof value[1] === "object" && value[1] !== null) {
      // The link is open before the client hears of it: whatever its open handler throws, the
      // link stays open and the deadline does not drop it.
      this.welcome = value[1] as WelcomeInfo;
      this.replicates = this.welcome.replicates === true;
      this.state = "open";
      this.generation++;
      this.#attempt = 0;
      clearTimeout(this.#handshakeTimer);
      this.events.open(this);
      return true;
    }
    const error = value[0] === OP.ERROR && isErrorCode(value[2])
      ? new KittenError(value[2], String(value[3]), value[4])
      : new KittenError("BAD_PROTOCOL", `Cannot connect to "${this.host.label}": expected welcome, got operation ${value[0]}`);
    if (isFatal(error.code) && !isRetryable(error.code)) {
      // A refusal (token, key, version) would be refused again: stop instead of hammering.
      this.stop();
      this.events.refused(this, error);
    } else {
      transport.close();
    }
    return false;
  }

  #scheduleReconnect(): void {
    const base = Math.min(this.options.reconnectDelayMs * 1.5 ** this.#attempt, this.options.maxReconnectDelayMs);
    this.#attempt++;
    const delay = base / 2 + Math.random() * base / 2; // jitter: clients restarting together spread out
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      if (this.state === "connecting") this.#dial();
    }, delay);
  }

  #scheduleFlush(): void {
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    queueMicrotask(() => {
      this.#flushScheduled = false;
      this.#flush();
    });
  }

  #flush(): void {
    if (this.#acks.size > 0) {
      for (const [sub, tags] of this.#acks) this.#batch.push(encode([OP.ACK, sub, tags]));
      this.#acks = new Map();
    }
    if (this.#mirrors.size > 0) {
      for (const [key, pairs] of this.#mirrors) {
        const bar = key.indexOf("|");
        this.#batch.push(encode([OP.ACK_MIRROR, Number(key.slice(0, bar)), key.slice(bar + 1), pairs]));
      }
      this.#mirrors = new Map();
    }
    if (this.#batch.byteLength === 0 || !this.#transport) return;
    this.#transport.write(this.#batch.take());
  }
}
