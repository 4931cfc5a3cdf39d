/**
 * Which queues this broker serves, when queues are spread over groups (`cluster.etcd`): the
 * broker's view of the queue map (cluster/queue_map.ts), loaded only by brokers that use etcd.
 *
 * `admit(queue)` answers every client operation that names a queue: null when this broker's
 * group owns it (the hot path pays one map lookup, and routes cache the answer), a promise when
 * the queue is not placed yet (placed by one etcd transaction; ask again once it settles), or a
 * NOT_OWNER refusal naming the owning group, its brokers and the map epoch.
 *
 * Without `cluster.etcd` there is one group and every queue is here: `admit` returns null.
 */
import { hostname } from "node:os";
import { KittenError } from "../protocol/errors.ts";
import type { Config } from "./config/config.ts";
import type { Logger } from "./log.ts";
import type { Queue } from "./queue/queue.ts";
import type { MapView, QueueMap, QueueOwner } from "./cluster/queue_map.ts";
import type { MoveRecord } from "./cluster/move_records.ts";

export interface PlacementHost {
  readonly config: Config;
  readonly log: Logger;
  readonly isMaster: boolean;
  queues(): Iterable<Queue>;
  /** Queues placed or moved: cached routes are dropped and clients that follow the map are told. */
  changed(queues: string[]): void;
  /** Move records changed (move/moves.ts acts on them). */
  movesChanged(records: MoveRecord[]): void;
}

/** Placements waiting for etcd at once; past it a new queue is refused for now (a sender inventing names cannot pile them up). */
const MAX_PLACING = 1000;
/** How long a first use of a queue waits for etcd to place it. */
const PLACE_TIMEOUT_MS = 5000;
/** How often a master tells the other groups how busy its queues are. */
const LOAD_EVERY_MS = 5000;

export class Placement {
  readonly #host: PlacementHost;
  readonly #enabled: boolean;
  #map: QueueMap | null = null;
  #loading: Promise<QueueMap | null> | null = null;
  #stopped = false;
  readonly #placing = new Map<string, Promise<void>>();
  /** Each queue's `received` counter at the last load report, and when that was. */
  #lastLoad: { at: number; received: Map<string, number> } | null = null;

  constructor(host: PlacementHost) {
    this.#host = host;
    // cluster.etcd needs a restart: whether this broker follows a map is fixed for its life.
    this.#enabled = host.config.cluster.etcd !== null;
  }

  /** True when queues are spread over groups (clients are told so in welcome). */
  get enabled(): boolean {
    return this.#enabled;
  }

  get group(): string {
    return this.#host.config.cluster.group;
  }

  /** The map itself, once loaded (moves use it); null without etcd. */
  get map(): QueueMap | null {
    return this.#map;
  }

  /** True for a broker registered in some group of this deployment: it may link as a peer (a queue move). */
  isMember(serviceId: string): boolean {
    return this.#map?.isMember(serviceId) ?? false;
  }

  /** True when the map says another group owns `queue`. */
  ownedElsewhere(queue: string): boolean {
    const owner = this.#map?.owner(queue);
    return owner !== undefined && owner.group !== this.group;
  }

  /** The newest map revision seen (0 before the map was read, or without etcd). */
  get epoch(): number {
    return this.#map?.epoch ?? 0;
  }

  /** Registers this broker in its group and reads the map; `port` is the client port bound. */
  start(port: number): void {
    if (!this.#enabled || this.#loading) return;
    this.#loading = import("./cluster/queue_map.ts").then(
      ({ QueueMap }) => {
        if (this.#stopped) return null;
        const config = this.#host.config;
        const etcd = config.cluster.etcd!;
        const address = advertisedAddress(config, port);
        const map = new QueueMap({
          endpoints: etcd.endpoints,
          prefix: etcd.prefix,
          group: config.cluster.group,
          serviceId: config.serviceId,
          address: () => address,
          leaseTtlSeconds: etcd.leaseTtlSeconds,
          log: (level, message) => this.#host.log[level]("map", message),
          changed: (queues) => this.#host.changed(queues),
          movesChanged: (records) => this.#host.movesChanged(records),
        });
        this.#map = map;
        map.start();
        map.ready.then(() => this.placeConfigured());
        return map;
      },
      (error) => {
        this.#host.log.error("map", `cannot load the etcd client: ${(error as Error).message}`);
        return null;
      },
    );
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#loading;
    await this.#map?.stop();
  }

  /** null: this group serves `queue`; a promise: it is being placed, ask again once settled. Throws NOT_OWNER. */
  admit(queue: string): Promise<void> | null {
    return this.unplaced(queue) ? this.place(queue) : null;
  }

  /** True when no group owns `queue` yet (place it first); false when this group does. Throws NOT_OWNER. */
  unplaced(queue: string): boolean {
    if (!this.#enabled) return false;
    const owner = this.#map?.owner(queue);
    if (owner === undefined) return true;
    if (owner.group === this.group) return false;
    throw this.#notOwner(queue, owner);
  }

  /** What MAP answers: the owners of `queues` (placing those that have none) and every group's brokers. */
  async view(queues: readonly string[]): Promise<MapView> {
    if (!this.#enabled) throw new KittenError("BAD_REQUEST", "Cannot answer map: this broker spreads no queues over groups (no cluster.etcd)");
    const placed = await Promise.allSettled(queues.map((queue) => this.place(queue)));
    const failed = placed.find((result) => result.status === "rejected");
    if (failed) throw (failed as PromiseRejectedResult).reason;
    return this.#map!.view(queues);
  }

  /** The owners of `queues` as this broker knows them, placing nothing (pushed to clients when they change). */
  known(queues: readonly string[]): MapView {
    return this.#map?.view(queues) ?? { epoch: 0, queues: {}, groups: {} };
  }

  /** Config `channels` entries are placed as soon as the map is read, and at each reload. */
  placeConfigured(): void {
    if (!this.#map) return;
    for (const queue of Object.keys(this.#host.config.channels)) {
      if (this.#map.owner(queue)) continue;
      this.place(queue).catch((error) => this.#host.log.warn("map", `cannot place queue "${queue}": ${(error as Error).message}`));
    }
  }

  /** Every group with its brokers and queues (status, metrics, the dashboard); null without etcd. */
  status(): { epoch: number; group: string; groups: Record<string, { brokers: string[]; queues: string[] }> } | null {
    if (!this.#enabled) return null;
    const groups: Record<string, { brokers: string[]; queues: string[] }> = {};
    const map = this.#map;
    if (map) {
      for (const [group, brokers] of Object.entries(map.groups())) groups[group] = { brokers, queues: [] };
      for (const [group, queues] of map.placed()) (groups[group] ??= { brokers: [], queues: [] }).queues = queues.sort();
    }
    return { epoch: this.epoch, group: this.group, groups };
  }

  /** Called about once a second: a master reports its queues' message rates every LOAD_EVERY_MS. */
  tick(now: number): void {
    const map = this.#map;
    if (!map || !this.#host.isMaster) return void (this.#lastLoad = null);
    const last = this.#lastLoad;
    if (last && now - last.at < LOAD_EVERY_MS) return;
    const received = new Map<string, number>();
    const rates: Record<string, number> = {};
    for (const queue of this.#host.queues()) {
      if (map.owner(queue.name)?.group !== this.group) continue;
      received.set(queue.name, queue.counters.received);
      const before = last?.received.get(queue.name);
      if (last && before !== undefined) rates[queue.name] = Math.round(((queue.counters.received - before) * 1000) / (now - last.at));
    }
    this.#lastLoad = { at: now, received };
    if (!last) return;
    map.publishLoad(rates).catch((error) => this.#host.log.warn("map", `cannot publish the group's load: ${(error as Error).message}`));
  }

  /** Places `queue` on a group (one etcd transaction; at most one at a time per queue); settles once its owner is known. */
  place(queue: string): Promise<void> {
    const placing = this.#placing.get(queue);
    if (placing) return placing;
    if (this.#placing.size >= MAX_PLACING) {
      throw new KittenError("STORE_UNAVAILABLE", `Cannot place queue "${queue}": ${MAX_PLACING} queues wait for etcd already`);
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new KittenError(
        "STORE_UNAVAILABLE",
        `Cannot place queue "${queue}" on a group: etcd did not answer within ${PLACE_TIMEOUT_MS} ms`,
      )), PLACE_TIMEOUT_MS);
    });
    const wanted = Object.hasOwn(this.#host.config.channels, queue) ? this.#host.config.channels[queue]!.group : undefined;
    const placed = (async () => {
      const map = await this.#loading;
      if (!map) throw new KittenError("STORE_UNAVAILABLE", `Cannot place queue "${queue}": the queue map is not loaded (see the broker log)`);
      await map.place(queue, wanted);
    })();
    const settled = Promise.race([placed, timeout]).finally(() => {
      clearTimeout(timer);
      this.#placing.delete(queue);
    });
    this.#placing.set(queue, settled);
    return settled;
  }

  #notOwner(queue: string, owner: QueueOwner): KittenError {
    const brokers = this.#map?.groups()[owner.group] ?? [];
    return new KittenError(
      "NOT_OWNER",
      `Cannot serve queue "${queue}" on group "${this.group}": group "${owner.group}" owns it (map epoch ${owner.epoch})`,
      { queue, group: owner.group, brokers, epoch: owner.epoch },
    );
  }
}

/** `host:port@serviceId` as clients reach this broker: `cluster.advertise`, else the client port's host and bound port. */
export function advertisedAddress(config: Config, port: number): string {
  if (config.cluster.advertise !== null) return `${config.cluster.advertise}@${config.serviceId}`;
  const host = config.socketServer.host;
  const name = host === "0.0.0.0" || host === "::" ? hostname() : host;
  return `${name.includes(":") ? `[${name}]` : name}:${port}@${config.serviceId}`;
}
