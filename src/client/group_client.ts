/**
 * The client of one group of brokers (one master, its slaves): `connect`, `send`, `listen`,
 * `consume`, `disconnect`. It keeps what the user asked for (subscriptions, unconfirmed sends,
 * pending requests) independently of connections, and replays it on every broker that accepts
 * the client, so nothing is lost across reconnects. The public `Client` (client.ts) makes the
 * subscriptions and routes each queue to the group that owns it: to one GroupClient per group, or
 * to one for every queue.
 */
import { EventEmitter } from "node:events";
import {
  type Challenge,
  isErrorCode,
  KittenError,
  OP,
  RecentMap,
  type RoleInfo,
  shouldResend,
  type WelcomeInfo,
} from "../protocol/mod.ts";
import { HostConnection } from "./connection.ts";
import { MapRequests, type MapView } from "./map_requests.ts";
import { answerChallenge, loadOrCreateKeys } from "./keys.ts";
import { type HostStatus, MasterTracker } from "./masters.ts";
import { type ClientOptions, defaultOptions, type Host, parseHost, parseOptions } from "./options.ts";
import { type PendingSend, PendingSends } from "./pending_sends.ts";
import { Receiver } from "./receiver.ts";
import { checkFrameSize, SendFrames } from "./send_frames.ts";
import { type Subscription, withCallback } from "./subscription.ts";
import { asError, report, tell } from "./events.ts";
import { type Dial, dialTcp } from "./transport.ts";

interface Pending {
  resolve(): void;
  reject(error: KittenError): void;
}

interface PendingRequest extends Pending {
  op: unknown[];
}

type Callback = (error: KittenError | null) => void;

/** What the router (client.ts) hears from a group's client beyond its events. */
export interface GroupHooks {
  /** Subscription numbers, unique across the groups of one Client. */
  nextSub(): number;
  /** A connection opened, before anything is replayed on it. */
  opened?(welcome: WelcomeInfo): void;
  /** A registration was refused; true when the router takes it (NOT_OWNER: sent to its owner). */
  refused?(subscription: Subscription, error: KittenError): boolean;
  /** MAP_INFO that answers no request: owners of queues changed. */
  mapChanged?(view: MapView): void;
}

/** How many confirmed sends the client keeps to bring a slave that was away up to date. */
const CONFIRMED_WINDOW = 20_000;

export class GroupClient extends EventEmitter {
  #options: ClientOptions | null = null;
  #connections: HostConnection[] = [];
  readonly #subscriptions = new Map<number, Subscription>();
  /** Unconfirmed sends by ref, in send order: replayed on every (re)connection and promotion, resent after a refusal that waiting fixes. */
  readonly #sends = new PendingSends({
    write: (send) => {
      for (const connection of this.#connections) if (connection.takesCopies) connection.sendFramed(send.frame);
    },
    resend: (send) => this.#resend(send),
    whyNoMaster: (channel) => this.#masters.whyNoMaster(channel),
  });
  /** Unanswered addId/removeId/close requests by ref. */
  readonly #requests = new Map<number, PendingRequest>();
  readonly #maps = new MapRequests();
  /** Registration refs awaiting an answer, with the connection they went to. */
  readonly #registrations = new Map<number, { subscription: Subscription; connection: HostConnection }>();
  #connectWaiters: Pending[] = [];
  #nextRef = 1;
  readonly #masters = new MasterTracker(() => this.#connections, {
    master: (host, epoch) => tell(this, "master", { host, epoch }),
    problem: (error) => report(this, error),
  });
  readonly #receiver = new Receiver(
    this.#subscriptions,
    this.#masters,
    () => this.#connections,
    (error) => report(this, error),
  );
  /** Sends the master confirmed recently, by ref: replayed to a slave that was away (see #catchUp). */
  readonly #confirmed = new RecentMap<number, Uint8Array>(CONFIRMED_WINDOW);
  readonly #frames: SendFrames = new SendFrames();
  readonly #dial: Dial;
  readonly #hooks: GroupHooks;
  /** Makes the link to one host, for the connect() in progress (null when idle). */
  #link: ((label: string) => HostConnection) | null = null;
  #keys: Promise<unknown> | null = null;

  constructor(dial: Dial = dialTcp, hooks: GroupHooks) {
    super();
    this.#dial = dial;
    this.#hooks = hooks;
  }

  /** True before connect(), after disconnect(), and once every host refused the client. */
  get idle(): boolean {
    return this.#options === null;
  }

  /** True while at least one broker has accepted the client. */
  isConnected(): boolean {
    return this.#connections.some((connection) => connection.isOpen);
  }

  /**
   * Connects to every host. Resolves (or calls back with no error) when a broker has accepted
   * the client; rejects when every host refused it. Network failures are retried forever.
   */
  connect(config: Partial<ClientOptions> | ClientOptions, callback?: Callback): Promise<void> {
    if (this.#options) {
      return withCallback(Promise.reject(new Error("Cannot connect: the client is already connected; call disconnect() first")) as Promise<void>, callback);
    }
    const options = parseOptions(config);
    this.#options = options;
    const done = new Promise<void>((resolve, reject) => this.#connectWaiters.push({ resolve, reject }));
    // The key pair is read (or created) once; every broker's challenge is signed with it.
    const keys = loadOrCreateKeys(options.keysDirectory, options.keysName);
    keys.catch(() => {}); // reported below, through connect()'s promise
    const prove = (host: Host, challenge: Challenge) => answerChallenge(keys, options.clientId, host, challenge);
    this.#link = (label) =>
      new HostConnection(parseHost(label), options, {
        open: (connection) => this.#onOpen(connection),
        close: (connection, error, wasOpen) => this.#onClose(connection, error, wasOpen),
        refused: (connection, error) => this.#onRefused(connection, error),
        frame: (connection, value) => this.#onFrame(connection, value),
        deliver: (connection, delivery) => this.#receiver.receive(connection, delivery),
        error: (_connection, error) => report(this, asError(error)),
      }, this.#dial, prove);
    this.#connections = options.hosts.map(this.#link);
    this.#keys = keys;
    // A key read outlives a disconnect(): it acts only on the connect() that started it.
    keys.then(
      () => {
        if (this.#options !== options) return;
        for (const connection of this.#connections) connection.start();
      },
      (error: KittenError) => {
        if (this.#options !== options) return;
        this.#reset(error);
      },
    );
    return withCallback(done, callback);
  }

  /**
   * Brokers that joined the group after connect() (the queue map lists them): linked like the
   * others. A host already linked (same host and port) is not linked twice.
   */
  addHosts(labels: readonly string[]): void {
    const link = this.#link;
    const options = this.#options;
    if (!link || !options) return;
    const linked = new Set(this.#connections.map((connection) => `${connection.host.host}:${connection.host.port}`));
    for (const label of labels) {
      const host = parseHost(label);
      if (linked.has(`${host.host}:${host.port}`)) continue;
      linked.add(`${host.host}:${host.port}`);
      const connection = link(label);
      this.#connections.push(connection);
      this.#keys?.then(() => {
        if (this.#options === options) connection.start();
      }, () => {});
    }
  }

  /**
   * Sends `data` to `channel` (`endpoint/version/id`, or `endpoint/version/*` to broadcast).
   * Resolves when the master confirms; rejects with a KittenError carrying a `code`. A refusal
   * that waiting fixes (NOT_ENOUGH_REPLICAS, STOPPING) does not reject, nor does the lack of a
   * master (no broker reached, only slaves, an old master fenced): the send goes again, with the
   * same message id, until it is confirmed or `sendTimeoutMs` has passed since this call, and
   * then rejects with TIMEOUT, naming why.
   */
  send(channel: string, data: unknown, callback?: Callback, timeoutMs?: number): Promise<void> {
    return withCallback(this.#send(channel, data, timeoutMs), callback);
  }

  #send(channel: string, data: unknown, timeoutMs?: number): Promise<void> {
    try {
      this.#frames.check(channel, data);
      const { maxPendingMessages: limit, sendTimeoutMs } = this.#options ?? defaultOptions();
      if (this.#sends.size >= limit) {
        throw new KittenError(
          "QUEUE_FULL",
          `Cannot send to "${channel}": ${this.#sends.size} sends await confirmation (maxPendingMessages ${limit})`,
        );
      }
      const ref = this.#nextRef++;
      const frame = this.#frames.frame(ref, channel, data);
      for (const connection of this.#connections) if (connection.isOpen) checkFrameSize(connection, channel, frame);
      return this.#sends.add(ref, channel, frame, timeoutMs ?? sendTimeoutMs);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Closes every connection; unconfirmed sends (those waiting for a resend too) and requests are rejected with CLOSED. */
  disconnect(callback?: Callback): Promise<void> {
    const wasConnected = this.isConnected();
    this.#reset(new KittenError("CLOSED", "Cannot complete: the client was disconnected"), (send) => {
      // As TIMEOUT does: no master to confirm it (read before the links stop), or its last refusal.
      const why = this.#sends.whyWaiting(send);
      return new KittenError(
        "CLOSED",
        `Cannot send to "${send.channel}": the client was disconnected before a broker confirmed it` +
          (why ? `; it was last refused with ${why.code}` : ""),
        undefined,
        why ? { cause: why } : undefined,
      );
    });
    if (wasConnected) tell(this, "disconnect");
    return withCallback(Promise.resolve(), callback);
  }

  /**
   * Back to idle (disconnect, keys that cannot be read, every host refusing): links stopped, and
   * every send, request, registration and connect() still waiting is rejected with `error`, so
   * nothing waits for a connection that will not come. Subscriptions stay, for the next connect().
   */
  #reset(error: KittenError, sendError: (send: PendingSend) => KittenError = () => error): void {
    // First, while the links still say why no master confirmed a send (rejections settle later).
    this.#sends.rejectAll(sendError);
    for (const connection of this.#connections) connection.stop();
    this.#connections = [];
    this.#options = null;
    this.#link = null;
    this.#keys = null;
    for (const pending of [...this.#requests.values(), ...this.#connectWaiters]) pending.reject(error);
    this.#requests.clear();
    this.#maps.rejectAll(error);
    this.#connectWaiters = [];
    for (const { subscription } of this.#registrations.values()) subscription.abandon(error);
    this.#registrations.clear();
  }

  // ── subscriptions and requests ─────────────────────────────────────────────────────────────

  /** Takes a subscription made elsewhere (the router): registered on every open link, and on each new one. */
  attach(subscription: Subscription): void {
    this.#subscriptions.set(subscription.sub, subscription);
    for (const connection of this.#connections) if (connection.isOpen) this.#register(connection, subscription);
  }

  /** Forgets a subscription no broker of this group registered (the router moves it elsewhere). */
  release(subscription: Subscription): void {
    this.#subscriptions.delete(subscription.sub);
  }

  /**
   * Gives every unconfirmed send back to the router, which sends it to the group owning its queue:
   * each rejects with NOT_OWNER without details (nothing was written yet: no link was open).
   */
  handOver(): void {
    this.#sends.rejectAll((send) => new KittenError("NOT_OWNER", `Cannot send to "${send.channel}" here: queues follow the map`));
  }

  /**
   * The queue moved to another group: its sends held back here (refused while it switched) are
   * given back to the router, each rejected with NOT_OWNER without details.
   */
  releaseHeld(queue: string): void {
    const prefix = `${queue}/`;
    this.#sends.releaseHeld(
      (send) => send.channel.startsWith(prefix),
      (send) => new KittenError("NOT_OWNER", `Cannot send to "${send.channel}" here: queue "${queue}" moved to another group`),
    );
  }

  /** Sends ADD_ID, REMOVE_ID or UNSUBSCRIBE (built by `build` from a ref) to every link. */
  request(build: (ref: number) => unknown[]): Promise<void> {
    return this.#request(build);
  }

  /**
   * Where queues live (MAP, brokers with `cluster.etcd`): asked of every open link (and of the
   * next one to open), answered by the first.
   */
  map(queues: string[]): Promise<MapView> {
    return this.#maps.ask(this.#nextRef++, queues, this.#connections);
  }

  #register(connection: HostConnection, subscription: Subscription): void {
    const ref = this.#nextRef++;
    this.#registrations.set(ref, { subscription, connection });
    connection.send(subscription.registration(ref));
  }

  /**
   * A broker that is away forgets the subscription with the connection, and it is not registered
   * again on reconnect: only the open links need an UNSUBSCRIBE.
   */
  detach(subscription: Subscription): Promise<void> {
    this.#subscriptions.delete(subscription.sub);
    if (!this.isConnected()) return Promise.resolve();
    return this.#request((ref) => [OP.UNSUBSCRIBE, ref, subscription.sub]);
  }

  #request(build: (ref: number) => unknown[]): Promise<void> {
    const ref = this.#nextRef++;
    const op = build(ref);
    return new Promise<void>((resolve, reject) => {
      this.#requests.set(ref, { op, resolve, reject });
      for (const connection of this.#connections) connection.send(op);
    });
  }

  // ── connection events ──────────────────────────────────────────────────────────────────────

  #onOpen(connection: HostConnection): void {
    const first = this.#connections.filter((c) => c.isOpen).length === 1;
    // The router decides from the first welcome whether queues follow a map, before any replay.
    if (connection.welcome) this.#hooks.opened?.(connection.welcome);
    // An old master is told (FENCE) before anything is registered on it.
    this.#masters.check(connection);
    if (connection.role === "slave" && connection.takesCopies) this.#catchUp(connection);
    // Replay, in this order: registrations (with their current ids), requests, then sends.
    for (const subscription of this.#subscriptions.values()) this.#register(connection, subscription);
    for (const [ref, request] of this.#requests) {
      // A subscription closed meanwhile is not registered on this fresh link: nothing to undo.
      if (!this.#subscriptions.has(request.op[2] as number)) {
        this.#requests.delete(ref);
        request.resolve();
        continue;
      }
      connection.send(request.op);
    }
    this.#replay(connection);
    this.#maps.replay(connection);
    for (const waiter of this.#connectWaiters) waiter.resolve();
    this.#connectWaiters = [];
    if (first) tell(this, "connect", { host: connection.host.label, welcome: connection.welcome });
  }

  #onClose(connection: HostConnection, error: Error | null, wasOpen: boolean): void {
    // Unanswered registrations on this link are sent again when it reopens.
    for (const [ref, entry] of this.#registrations) if (entry.connection === connection) this.#registrations.delete(ref);
    if (error) report(this, error);
    const anyOpen = this.#connections.some((c) => c.isOpen && c !== connection);
    if (wasOpen && !anyOpen) {
      tell(this, "disconnect", { host: connection.host.label, error });
    }
  }

  #onRefused(_connection: HostConnection, error: KittenError): void {
    report(this, error);
    // Every host refused: the client is idle again and connect() may be called anew.
    if (this.#connections.every((c) => c.state === "stopped")) this.#reset(error);
  }

  #onFrame(connection: HostConnection, value: unknown[]): void {
    switch (value[0]) {
      case OP.OK: {
        // A registration's OK says the prefetch granted: `[OK, [ref], role, {prefetch}]`.
        const granted = (value[3] as { prefetch?: unknown } | undefined)?.prefetch;
        const prefetch = typeof granted === "number" ? granted : null;
        for (const ref of value[1] as number[]) this.#settle(connection, ref, null, value[2] === "slave", prefetch);
        return;
      }
      case OP.ERROR: {
        const code = isErrorCode(value[2]) ? value[2] : "INTERNAL";
        const error = new KittenError(code, String(value[3]), value[4]);
        if (typeof value[1] === "number") this.#settle(connection, value[1], error, false);
        else report(this, error);
        return;
      }
      case OP.ROLE: {
        const { role, epoch, replicates } = value[1] as RoleInfo;
        if (connection.welcome) connection.welcome = { ...connection.welcome, role, epoch };
        if (typeof replicates === "boolean") connection.replicates = replicates;
        this.#masters.check(connection);
        // A slave just promoted gets every unconfirmed send: one it stored already (a copy, or
        // its old master's stream) is confirmed and not queued twice, one it never got is stored.
        if (this.#masters.isMaster(connection)) this.#replay(connection);
        return;
      }
      case OP.MAP_INFO: {
        const view = value[2] as MapView;
        if (typeof value[1] !== "number") return this.#hooks.mapChanged?.(view);
        this.#maps.settle(value[1], view, null);
        return;
      }
      default:
        return; // PONG and future broker operations need nothing here
    }
  }

  /** Answers a send, a request or a registration (`prefetch`: what the broker granted it). */
  #settle(
    connection: HostConnection,
    ref: number,
    error: KittenError | null,
    fromSlave: boolean,
    prefetch: number | null = null,
  ): void {
    const send = this.#sends.get(ref);
    if (send) return this.#settleSend(connection, send, error, fromSlave);
    const request = this.#requests.get(ref);
    if (request) {
      this.#requests.delete(ref);
      return error ? request.reject(error) : request.resolve();
    }
    if (error && this.#maps.settle(ref, null, error)) return;
    const entry = this.#registrations.get(ref);
    if (!entry) return;
    this.#registrations.delete(ref);
    if (error && this.#hooks.refused?.(entry.subscription, error)) return;
    entry.subscription.settle(error, prefetch);
  }

  /**
   * A send is settled by the master only: a slave's "stored as slave" (or its error) does not say
   * that the message will be delivered, nor does a fenced master's answer. The master's refusal
   * that waiting fixes (NOT_ENOUGH_REPLICAS, STOPPING…) keeps the send, to be sent again; any other
   * refusal rejects it.
   */
  #settleSend(connection: HostConnection, send: PendingSend, error: KittenError | null, fromSlave: boolean): void {
    if (fromSlave && !error) connection.storedUpTo = Math.max(connection.storedUpTo, send.ref);
    if (fromSlave || !this.#masters.isMaster(connection)) return;
    if (error && shouldResend(error.code)) return this.#sends.refused(send, error);
    if (error) return this.#sends.fail(send, error);
    if (this.#someNeedCatchUp(connection)) this.#confirmed.set(send.ref, send.frame);
    this.#sends.confirm(send);
  }

  /**
   * True when a broker besides `master` may need the sends it confirmed, once back (#catchUp): one
   * that takes no replication stream, or that never said whether it does.
   */
  #someNeedCatchUp(master: HostConnection): boolean {
    for (const connection of this.#connections) if (connection !== master && !connection.replicates) return true;
    return false;
  }

  /**
   * A refused send goes again to the master only: the slaves hold it already, get it from the
   * master's stream, or get it when they reconnect. With no master connected nothing is written: a new link, or a slave's promotion,
   * gets every pending send at once (#replay).
   */
  #resend(send: PendingSend): void {
    for (const connection of this.#connections) if (this.#masters.isMaster(connection)) this.#write(connection, send);
  }

  /**
   * Every pending send to a new link, or to a slave just promoted, in call order. A link to the
   * master ends a hold on sends (PendingSends.replay): they have all gone to it.
   */
  #replay(connection: HostConnection): void {
    if (!connection.takesCopies) return; // a slave that takes the stream gets the sends from its master
    this.#sends.replay((send) => this.#write(connection, send), { toMaster: this.#masters.isMaster(connection) });
  }

  /** A pending send to one broker; one larger than that broker takes is refused here, for good. */
  #write(connection: HostConnection, send: PendingSend): void {
    try {
      checkFrameSize(connection, send.channel, send.frame);
    } catch (error) {
      return this.#sends.fail(send, error as KittenError);
    }
    connection.sendFramed(send.frame);
  }

  /** Where each host stands: connected or not, its role and epoch, and which one is master. */
  status(): HostStatus[] {
    return this.#masters.status();
  }

  /**
   * A slave that was away missed what the master confirmed and acked meanwhile. It gets the sends
   * confirmed after the last one it stored (from a bounded window), and the acks, again: without
   * them a failover to it would lose those messages, or deliver acked ones again.
   */
  #catchUp(connection: HostConnection): void {
    for (const [ref, frame] of this.#confirmed.entries()) if (ref > connection.storedUpTo) connection.sendFramed(frame);
    this.#receiver.catchUp(connection);
  }
}
