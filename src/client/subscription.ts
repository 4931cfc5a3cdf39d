/**
 * A `listen()` or `consume()` registration as the user sees it: the handler, the ids, and the
 * `addId` / `removeId` / `close` methods. It outlives connections: the client registers it again
 * on every broker that (re)accepts the client.
 */
import { checkChannelParts, type DeadLetterInfo, KittenError, OP, parseChannel } from "../protocol/mod.ts";

/** What a delivery says about itself. */
export interface DeliveryInfo {
  /** The sender's globally unique message id (the same on every delivery of that message). */
  messageId: string;
  channel: { endpoint: string; version: string; id: string };
  /** When the broker received the message (ms since epoch). */
  created: number;
  /** How many times this message was delivered to this group before (0 on first delivery). */
  nbRequeues: number;
  /** The subscription that received it. */
  handlerId: number;
  /** On messages of a dead-letter queue: why the message died and where it was sent. */
  deadLetter?: DeadLetterInfo;
}

/** `done()` acks; `done(false)` requeues now; `done(false, seconds)` requeues after a delay. */
export type Done = (ok?: boolean, delaySeconds?: number) => void;
export type ListenHandler = (error: KittenError | null, message: unknown, info: DeliveryInfo | undefined) => unknown;
export type ConsumeHandler = (
  error: KittenError | null,
  message: unknown,
  done: Done,
  info: DeliveryInfo | undefined,
) => unknown;

/** A channel as a string `endpoint/version/id` or as an object with several ids. */
export type ChannelInput = string | { endpoint: string; version: string; ids: unknown[] | string | number };

export interface SubscribeOptions {
  /** Most unacked deliveries this handler holds (capped by the broker's channel setting). */
  prefetch?: number;
}

export type IdCallback = (error: KittenError | null) => void;

/** The link a subscription needs from the client. */
export interface SubscriptionHost {
  request(op: (ref: number) => unknown[]): Promise<void>;
  /** Forgets the subscription locally and unregisters it from the brokers that know it. */
  unsubscribe(subscription: Subscription): Promise<void>;
}

export class Subscription {
  /** Settles when the broker accepted (or refused) the registration. */
  readonly ready: Promise<void>;
  readonly endpoint: string;
  readonly version: string;
  /** The ids currently registered (kept in step with addId/removeId). */
  readonly ids: string[];
  /** Set when the channel itself is invalid: the registration is never sent. */
  readonly invalid: KittenError | null = null;
  #settleReady!: (error: KittenError | null) => void;
  #closed = false;
  #prefetch: number | null = null;

  constructor(
    readonly sub: number,
    readonly kind: "listen" | "consume",
    channel: ChannelInput,
    readonly handler: ListenHandler | ConsumeHandler,
    readonly options: SubscribeOptions,
    readonly host: SubscriptionHost,
  ) {
    if (typeof handler !== "function") throw new TypeError(`Cannot ${kind}: handler must be a function`);
    let parsed = { endpoint: "", version: "", ids: [] as string[] };
    try {
      parsed = parseChannelInput(channel, kind);
    } catch (error) {
      if (!(error instanceof KittenError)) throw error;
      this.invalid = error;
    }
    this.endpoint = parsed.endpoint;
    this.version = parsed.version;
    this.ids = parsed.ids;
    this.ready = new Promise((resolve, reject) => {
      this.#settleReady = (error) => (error ? reject(error) : resolve());
    });
    this.ready.catch(() => {}); // the handler hears about a refusal; an unawaited promise must not crash
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * The unacked deliveries the broker lets this handler hold: the `prefetch` asked, capped by the
   * channel's setting (the broker's `prefetch`, 1 by default, or `listenerPrefetch`). Set once a
   * broker accepted the registration (the latest one's answer); null before, or when the brokers
   * do not say (older than this client).
   */
  get prefetch(): number | null {
    return this.#prefetch;
  }

  /** The registration operation for one broker. */
  registration(ref: number): unknown[] {
    return [this.kind === "listen" ? OP.LISTEN : OP.CONSUME, ref, this.sub, this.endpoint, this.version, [...this.ids], this.options.prefetch ?? null];
  }

  /** The broker answered the registration. A refusal reaches the handler as `(err, …)`. */
  settle(error: KittenError | null, prefetch: number | null = null): void {
    if (prefetch !== null) this.#prefetch = prefetch;
    this.#settleReady(error);
    if (error) this.fail(error);
  }

  /** The client gave up on the registration (disconnect): `ready` settles, the handler is not called. */
  abandon(error: KittenError): void {
    this.#settleReady(error);
  }

  fail(error: KittenError): void {
    if (this.kind === "listen") (this.handler as ListenHandler)(error, null, undefined);
    else (this.handler as ConsumeHandler)(error, null, () => {}, undefined);
  }

  /** Adds ids at runtime (checked by the broker like a new registration). */
  addId(id: unknown, callback?: IdCallback): Promise<void> {
    return this.#changeIds(id, true, callback);
  }

  removeId(id: unknown, callback?: IdCallback): Promise<void> {
    return this.#changeIds(id, false, callback);
  }

  /** Stops this registration on every broker. */
  close(callback?: IdCallback): Promise<void> {
    this.#closed = true;
    return withCallback(this.host.unsubscribe(this), callback);
  }

  #changeIds(id: unknown, add: boolean, callback?: IdCallback): Promise<void> {
    const ids = normalizeIds(id);
    try {
      if (this.invalid) throw this.invalid;
      checkChannelParts(this.endpoint, this.version, ids, add ? "Cannot add id to" : "Cannot remove id from");
    } catch (error) {
      return withCallback(Promise.reject(error), callback);
    }
    // Updated at once, so a registration replayed meanwhile (reconnect) carries the new ids.
    const changed = ids.filter((value) => this.ids.includes(value) !== add);
    for (const value of changed) {
      if (add) this.ids.push(value);
      else this.ids.splice(this.ids.indexOf(value), 1);
    }
    const done = this.host.request((ref) => [add ? OP.ADD_ID : OP.REMOVE_ID, ref, this.sub, ids]);
    // A refused addId must not stay: replayed after a reconnect, it would get the whole
    // registration refused, granted ids included.
    if (add) done.catch(() => this.ids.splice(0, this.ids.length, ...this.ids.filter((value) => !changed.includes(value))));
    return withCallback(done, callback);
  }
}

/** Calls `callback(err)` when given, and returns a promise that never goes unhandled in that case. */
export function withCallback(promise: Promise<void>, callback?: (error: KittenError | null) => void): Promise<void> {
  if (!callback) return promise;
  promise.then(() => callback(null), (error) => callback(error));
  promise.catch(() => {});
  return promise;
}

function normalizeIds(value: unknown): string[] {
  const list = Array.isArray(value) ? value : [value];
  return list.map((id) => {
    if (typeof id !== "string" && typeof id !== "number") {
      throw new TypeError(`Cannot use id ${String(id)}: ids must be strings or numbers`);
    }
    return String(id);
  });
}

function parseChannelInput(channel: ChannelInput, kind: string): { endpoint: string; version: string; ids: string[] } {
  const action = kind === "listen" ? "Cannot listen to" : "Cannot consume";
  if (typeof channel === "string") {
    const parsed = parseChannel(channel, action);
    return { endpoint: parsed.endpoint, version: parsed.version, ids: [parsed.id] };
  }
  if (channel === null || typeof channel !== "object" || typeof channel.endpoint !== "string" ||
    typeof channel.version !== "string" || channel.ids === undefined || channel.ids === null) {
    throw new TypeError(`${action}: channel must be "endpoint/version/id" or { endpoint, version, ids }`);
  }
  const ids = [...new Set(normalizeIds(channel.ids))];
  checkChannelParts(channel.endpoint, channel.version, ids, action);
  return { endpoint: channel.endpoint, version: channel.version, ids };
}
