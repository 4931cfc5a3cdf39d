/**
 * The Kitten-MQ client: `connect`, `send`, `listen`, `consume`, `disconnect`, with callbacks (0.12's
 * API, unchanged) and promises.
 *
 * Each operation goes to the group of brokers that owns its queue. Brokers without a queue map (no
 * `cluster.etcd`) serve every queue: everything goes to the brokers of `hosts`, one group, through
 * one GroupClient (group_client.ts). Brokers with a map say so in WELCOME; `hosts` is then a seed:
 * the client asks it where each queue lives (MAP) and opens links to the brokers of every group it
 * uses, one GroupClient per group. A broker that does not own a queue refuses with NOT_OWNER,
 * naming the owner and the map epoch; when that is newer than what the client knew it is followed
 * at once, so an operation reaches the owner after one redirect, and a move never fails a send.
 */
import { EventEmitter } from "node:events";
import { clearTimeout, setTimeout } from "node:timers";
import { isRetryable, KittenError, parseChannel, queueName, type WelcomeInfo } from "../protocol/mod.ts";
import { GroupClient, type GroupHooks } from "./group_client.ts";
import type { MapView } from "./map_requests.ts";
import type { HostStatus } from "./masters.ts";
import { type ClientOptions, defaultOptions, parseHost, parseOptions } from "./options.ts";
import { redirectOf, Routing } from "./routing.ts";
import {
  type ChannelInput,
  type ConsumeHandler,
  type ListenHandler,
  type SubscribeOptions,
  Subscription,
  withCallback,
} from "./subscription.ts";
import { type Dial, dialTcp } from "./transport.ts";
import { asError, report } from "./events.ts";

type Callback = (error: KittenError | null) => void;

/** `unknown` until the first broker's welcome says whether queues follow a map. */
type Mode = "unknown" | "single" | "routed";

interface Placed {
  subscription: Subscription;
  /** The group client it is registered with; null while its queue's owner is looked up. */
  on: GroupClient | null;
}

/** Wait before asking again when a broker's map is no newer than the client's, or etcd is away. */
const RETRY_MS = 100;

export class Client extends EventEmitter {
  readonly #dial: Dial;
  #options: ClientOptions | null = null;
  #mode: Mode = "unknown";
  /** The brokers of `hosts`: every queue's group without a map, the one asked where queues live with one. */
  #seed: GroupClient;
  readonly #groups = new Map<string, GroupClient>();
  readonly #routing = new Routing();
  readonly #subscriptions = new Map<number, Placed>();
  /** Queues whose owner the seed is being asked for. */
  readonly #locating = new Map<string, Promise<void>>();
  #nextSub = 1;

  constructor(dial: Dial = dialTcp) {
    super();
    this.#dial = dial;
    this.#seed = this.#newSeed();
  }

  /** True while at least one broker has accepted the client. */
  isConnected(): boolean {
    if (this.#seed.isConnected()) return true;
    for (const group of this.#groups.values()) if (group.isConnected()) return true;
    return false;
  }

  /**
   * Connects to every host. Resolves (or calls back with no error) when a broker has accepted
   * the client; rejects when every host refused it. Network failures are retried forever.
   */
  connect(config: Partial<ClientOptions>, callback?: Callback): Promise<void> {
    if (this.#options && !this.#seed.idle) {
      return withCallback(Promise.reject(new Error("Cannot connect: the client is already connected; call disconnect() first")) as Promise<void>, callback);
    }
    const options = parseOptions(config);
    if (this.#options) this.#reset(); // every host refused the last connect(): start again
    this.#options = options;
    return this.#seed.connect(options, callback);
  }

  /**
   * Sends `data` to `channel` (`endpoint/version/id`, or `endpoint/version/*` to broadcast).
   * Resolves when the master of the queue's group confirms; rejects with a KittenError carrying a
   * `code`. A refusal that waiting fixes (NOT_ENOUGH_REPLICAS, STOPPING, a queue moving to another
   * group) does not reject, nor does the lack of a master: the send goes again, with the same
   * message id, until it is confirmed or `sendTimeoutMs` has passed since this call, and then
   * rejects with TIMEOUT, naming why.
   */
  send(channel: string, data: unknown, callback?: Callback): Promise<void> {
    return withCallback(this.#send(channel, data), callback);
  }

  #send(channel: string, data: unknown): Promise<void> {
    if (this.#mode === "single") return this.#seed.send(channel, data);
    const deadline = performance.now() + (this.#options ?? defaultOptions()).sendTimeoutMs;
    if (this.#mode === "routed") return this.#sendRouted(channel, data, deadline);
    // Before any welcome the seed takes it; if queues turn out to follow a map, it hands it back.
    return this.#seed.send(channel, data).catch((error) => this.#rerouted(error, channel, data, deadline));
  }

  #sendRouted(channel: string, data: unknown, deadline: number): Promise<void> {
    let queue: string;
    try {
      const parsed = parseChannel(channel, "Cannot send to");
      queue = queueName(parsed.endpoint, parsed.version);
    } catch (error) {
      return Promise.reject(error);
    }
    const group = this.#ownerOf(queue);
    if (group === null) return this.#locate(queue, channel, deadline).then(() => this.#sendRouted(channel, data, deadline));
    const remaining = Math.max(1, Math.ceil(deadline - performance.now()));
    return group.send(channel, data, undefined, remaining).catch((error) => this.#rerouted(error, channel, data, deadline));
  }

  /** A send refused with NOT_OWNER goes to the owner the refusal names (or the map names); any other refusal stands. */
  #rerouted(error: unknown, channel: string, data: unknown, deadline: number): Promise<void> {
    if (!(error instanceof KittenError) || error.code !== "NOT_OWNER" || this.#mode !== "routed") return Promise.reject(error);
    if (performance.now() >= deadline) {
      return Promise.reject(
        new KittenError("TIMEOUT", `Cannot send to "${channel}": no group took it within sendTimeoutMs; it was last refused with NOT_OWNER`, undefined, {
          cause: error,
        }),
      );
    }
    const redirect = redirectOf(error.details);
    if (redirect && this.#routing.redirect(redirect)) {
      this.#follow([redirect.queue]);
      return this.#sendRouted(channel, data, deadline);
    }
    // The owner named is the one the client knows already, at that epoch or a newer one: an
    // earlier refusal (sends on their way together) or a MAP_INFO push took the client there
    // while this send was on its way to the old owner. It goes there at once.
    if (redirect && this.#routing.agrees(redirect)) return this.#sendRouted(channel, data, deadline);
    // No newer owner named (a send handed back before any link opened, or a broker whose map is
    // behind the client's): ask where the queue lives, after a pause if a broker refused it.
    if (redirect) this.#routing.forget(redirect.queue);
    return (redirect ? pause(RETRY_MS) : Promise.resolve()).then(() => this.#sendRouted(channel, data, deadline));
  }

  /** Fan-out: every listening clientId gets each message; acked automatically. */
  listen(channel: ChannelInput, handler: ListenHandler, options: SubscribeOptions = {}): Subscription {
    return this.#subscribe("listen", channel, handler, options);
  }

  /** Work queue: each message goes to one consumer, which calls `done()` / `done(false, s)`. */
  consume(channel: ChannelInput, handler: ConsumeHandler, options: SubscribeOptions = {}): Subscription {
    return this.#subscribe("consume", channel, handler, options);
  }

  /** Closes every connection; unconfirmed sends (those waiting for a resend too) and requests are rejected with CLOSED. */
  disconnect(callback?: Callback): Promise<void> {
    this.#reset();
    return withCallback(Promise.resolve(), callback);
  }

  /** Where each host stands: connected or not, its role, epoch and group, and which one is master. */
  status(): HostStatus[] {
    const statuses: HostStatus[] = [];
    const seen = new Set<string>();
    for (const group of this.#groups.values()) {
      for (const status of group.status()) {
        seen.add(address(status.host));
        statuses.push(status);
      }
    }
    for (const status of this.#seed.status()) if (!seen.has(address(status.host))) statuses.push(status);
    return statuses;
  }

  /**
   * Every link is stopped and every send and request still waiting is rejected with CLOSED (by the
   * group clients); subscriptions stay, registered again at the next connect().
   */
  #reset(): void {
    const groups = [...this.#groups.values()];
    const seed = this.#seed;
    this.#groups.clear();
    this.#routing.clear();
    this.#locating.clear();
    this.#mode = "unknown";
    this.#options = null;
    this.#seed = this.#newSeed();
    for (const placed of this.#subscriptions.values()) {
      placed.on = this.#seed;
      this.#seed.attach(placed.subscription);
    }
    for (const group of groups) group.disconnect();
    seed.disconnect();
  }

  // ── subscriptions ──────────────────────────────────────────────────────────────────────────

  #subscribe(
    kind: "listen" | "consume",
    channel: ChannelInput,
    handler: ListenHandler | ConsumeHandler,
    options: SubscribeOptions,
  ): Subscription {
    const subscription: Subscription = new Subscription(this.#nextSub++, kind, channel, handler, options, {
      request: (build) => this.#placed(subscription)?.on?.request(build) ?? Promise.resolve(),
      unsubscribe: (closed) => this.#unsubscribe(closed),
    });
    if (subscription.invalid) {
      const error = subscription.invalid;
      queueMicrotask(() => {
        try {
          subscription.settle(error); // the handler hears of it, as (err, …)
        } catch (thrown) {
          report(this, asError(thrown));
        }
      });
      return subscription;
    }
    const placed: Placed = { subscription, on: null };
    this.#subscriptions.set(subscription.sub, placed);
    this.#place(placed);
    return subscription;
  }

  #placed(subscription: Subscription): Placed | undefined {
    return this.#subscriptions.get(subscription.sub);
  }

  #unsubscribe(subscription: Subscription): Promise<void> {
    const placed = this.#subscriptions.get(subscription.sub);
    this.#subscriptions.delete(subscription.sub);
    return placed?.on?.detach(subscription) ?? Promise.resolve();
  }

  /** Registers a subscription with the group owning its queue: the seed without a map, else once the owner is known. */
  #place(placed: Placed): void {
    const { subscription } = placed;
    if (this.#mode !== "routed") {
      placed.on = this.#seed;
      this.#seed.attach(subscription);
      return;
    }
    const queue = queueName(subscription.endpoint, subscription.version);
    const group = this.#ownerOf(queue);
    if (group) {
      placed.on = group;
      group.attach(subscription);
      return;
    }
    placed.on = null;
    const seed = this.#seed;
    this.#locate(queue, `${queue}/*`, Infinity).then(
      () => this.#replace(placed, seed),
      (error: KittenError) => {
        if (this.#seed !== seed || this.#subscriptions.get(subscription.sub) !== placed) return;
        if (isRetryable(error.code)) pause(RETRY_MS).then(() => this.#replace(placed, seed));
        else subscription.settle(error);
      },
    );
  }

  /** Places a subscription again after a lookup, unless it was closed or the client reset meanwhile. */
  #replace(placed: Placed, seed: GroupClient): void {
    if (this.#seed !== seed || this.#subscriptions.get(placed.subscription.sub) !== placed || placed.on !== null) return;
    this.#place(placed);
  }

  /** Subscriptions of queues whose owner changed leave their old group and register with the new one. */
  #follow(queues: readonly string[]): void {
    const moved = new Set(queues);
    for (const placed of this.#subscriptions.values()) {
      const { subscription } = placed;
      const queue = queueName(subscription.endpoint, subscription.version);
      if (!moved.has(queue) || placed.on === null) continue;
      const owner = this.#ownerOf(queue);
      if (owner === placed.on) continue;
      placed.on.detach(subscription).catch(() => {}); // the old owner requeues what it delivered
      placed.on = null;
      this.#place(placed);
    }
  }

  // ── the map ────────────────────────────────────────────────────────────────────────────────

  /** The group client of the group owning `queue`, or null while the owner (or its brokers) is unknown. */
  #ownerOf(queue: string): GroupClient | null {
    const owner = this.#routing.owner(queue);
    if (!owner) return null;
    const known = this.#groups.get(owner.group);
    if (known) return known;
    const brokers = this.#routing.brokers(owner.group);
    if (brokers.length === 0 || !this.#options) return null;
    // The seed hosts of that group too: a broker the user named may not be listed yet (it joins the
    // map under its lease a moment after it starts).
    const named = this.#seed.status().filter((status) => status.group === owner.group).map((status) => status.host);
    const hosts = [...this.#withToken(brokers), ...named];
    const group: GroupClient = new GroupClient(this.#dial, {
      nextSub: () => this.#nextSub++,
      refused: (subscription: Subscription, error: KittenError): boolean => this.#registrationRefused(group, subscription, error),
    });
    group.on("master", (...args: unknown[]) => this.emit("master", ...args));
    group.on("error", (error: Error) => report(this, error));
    this.#groups.set(owner.group, group);
    group.connect({ ...this.#options, hosts: unique(hosts) }).catch((error: Error) => report(this, error));
    return group;
  }

  /** Brokers the map lists, as hosts with the seed's token (the map does not carry it). */
  #withToken(brokers: readonly string[]): string[] {
    const token = this.#options?.hosts.map((host) => parseHost(host).token).find((value) => value !== null) ?? null;
    return brokers.map((broker) => (token ? `${broker}#${token}` : broker));
  }

  /** Asks the seed where `queue` lives; rejects with TIMEOUT past `deadline`, or with the seed's refusal. */
  #locate(queue: string, channel: string, deadline: number): Promise<void> {
    let locating = this.#locating.get(queue);
    if (!locating) {
      // An owner known, but no broker of its group (none alive, or not in the map yet): the seed
      // would answer the same at once, so it is asked again after a pause.
      const known = this.#routing.owner(queue) !== undefined;
      const seed = this.#seed;
      this.#routing.forget(queue);
      const asked = known
        ? pause(RETRY_MS).then(() => {
          if (this.#seed !== seed) throw new KittenError("CLOSED", "Cannot complete: the client was disconnected");
          return seed.map([queue]);
        })
        : seed.map([queue]);
      locating = asked.then(
        (view) => this.#learn(view),
        (error: KittenError) => (isRetryable(error.code) && error.code !== "TIMEOUT" ? pause(RETRY_MS) : Promise.reject(error)),
      ).finally(() => this.#locating.delete(queue));
      this.#locating.set(queue, locating);
    }
    if (deadline === Infinity) return locating;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new KittenError("TIMEOUT", `Cannot send to "${channel}": no broker said which group owns queue "${queue}" within sendTimeoutMs`));
      }, Math.max(1, deadline - performance.now()));
      locating.then(resolve, reject).finally(() => clearTimeout(timer));
    });
  }

  #learn(view: MapView): void {
    const moved = this.#routing.learn(view);
    // Sends held back by a queue's old group (refused while it switched) go to its new one now.
    for (const queue of moved) {
      const owner = this.#routing.owner(queue)?.group;
      for (const [group, client] of this.#groups) if (group !== owner) client.releaseHeld(queue);
    }
    for (const [group, client] of this.#groups) client.addHosts(this.#withToken(this.#routing.brokers(group)));
    if (moved.length > 0) this.#follow(moved);
  }

  #registrationRefused(group: GroupClient, subscription: Subscription, error: KittenError): boolean {
    if (error.code !== "NOT_OWNER") return false;
    const placed = this.#subscriptions.get(subscription.sub);
    if (!placed || placed.on !== group) return true; // moved already (every broker of the group refuses)
    const queue = queueName(subscription.endpoint, subscription.version);
    const redirect = redirectOf(error.details);
    // Followed at once, as a refused send is: a newer owner, or the one the client knows already.
    const follow = redirect !== null && (this.#routing.redirect(redirect) || this.#routing.agrees(redirect));
    group.detach(subscription).catch(() => {});
    placed.on = null;
    if (follow) {
      this.#place(placed);
      return true;
    }
    // No newer owner named: the group that refused is behind the client's map (it has not seen the
    // queue arrive yet). Registering there again at once would be refused again and again: the
    // map is asked again after a pause.
    this.#routing.forget(queue);
    const seed = this.#seed;
    pause(RETRY_MS).then(() => this.#replace(placed, seed));
    return true;
  }

  // ── the seed ───────────────────────────────────────────────────────────────────────────────

  #newSeed(): GroupClient {
    const hooks: GroupHooks = {
      nextSub: () => this.#nextSub++,
      opened: (welcome) => this.#seedOpened(seed, welcome),
      refused: (subscription, error) => this.#registrationRefused(seed, subscription, error),
      mapChanged: (view) => this.#learn(view),
    };
    const seed: GroupClient = new GroupClient(this.#dial, hooks);
    for (const event of ["connect", "disconnect", "master"]) seed.on(event, (...args) => this.emit(event, ...args));
    seed.on("error", (error) => report(this, error));
    return seed;
  }

  /**
   * The first welcome says whether queues follow a map. If they do, what the seed holds (sends and
   * registrations made before, none of them written yet) goes to each queue's owner. A link of the
   * seed that opens again asks the map of every queue in use, to be told of its changes again.
   */
  #seedOpened(seed: GroupClient, welcome: WelcomeInfo): void {
    if (seed !== this.#seed) return;
    if (this.#mode === "routed") {
      const queues = this.#routing.queues();
      if (queues.length > 0) seed.map(queues).then((view) => this.#learn(view), () => {});
      return;
    }
    if (this.#mode !== "unknown") return;
    this.#mode = welcome.map === true ? "routed" : "single";
    if (this.#mode === "single") return;
    seed.handOver();
    for (const placed of this.#subscriptions.values()) {
      if (placed.on !== seed) continue;
      seed.release(placed.subscription);
      placed.on = null;
      this.#place(placed);
    }
  }
}

/** Creates a client (0.12's entry point: `require('kitten-mq').client()`). */
export function client(): Client {
  return new Client();
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref?.());
}

/** Host labels without a second one for the same `host:port`. */
function unique(labels: readonly string[]): string[] {
  const seen = new Set<string>();
  return labels.filter((label) => {
    const key = address(label);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/** `host:port` of a host label, to match a seed host with a broker the map lists. */
function address(label: string): string {
  try {
    const host = parseHost(label);
    return `${host.host}:${host.port}`;
  } catch {
    return label;
  }
}
