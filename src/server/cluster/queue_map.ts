/**
 * The map of a deployment, held by etcd: which group owns each queue (`<prefix>queues/<endpoint>/
 * <version>` = {"group"}), which brokers each group has (`<prefix>groups/<group>/members/
 * <serviceId>` = {"address"}, under the broker's own lease, so a broker that dies leaves it), and
 * how busy each group's queues are (`<prefix>groups/<group>/load` = {queue: msg/s}, written by
 * the group's master).
 *
 * - A queue is placed once, by one etcd transaction that creates its key only if it does not
 *   exist: two brokers placing a new queue at once agree on the group the first one wrote.
 * - A queue's map epoch is its key's mod revision; the map's epoch is the newest revision this
 *   broker has seen. etcd revisions only grow, so a client compares epochs to keep the newer.
 * - Every broker reads the map once, then follows it through one watch per prefix started at the
 *   revision of that read: no change is missed between the read and the watch.
 * - Every etcd call has a deadline; failures are logged and retried, nothing throws out of a
 *   watch callback. `place` rejects to its caller.
 */
import type { Etcd3, IKeyValue, Lease, Namespace, Watcher } from "etcd3";
import { KittenError } from "../../protocol/errors.ts";
import { connectEtcd } from "./etcd_client.ts";
import { createMove, MOVES, type MoveRecord, newMove, parseMoveRecord, switchOwner, updateMove } from "./move_records.ts";

export interface QueueMapOptions {
  endpoints: string[];
  prefix: string;
  /** `cluster.group` of this broker. */
  group: string;
  serviceId: string;
  /** Where clients reach this broker (`host:port@serviceId`), read when the member key is written. */
  address: () => string;
  leaseTtlSeconds: number;
  log: (level: "info" | "warn" | "error", message: string) => void;
  /** Queues placed or moved (a watch event, or this broker's own placement). */
  changed: (queues: string[]) => void;
  /** Move records written or changed (moves/), and leaders of groups that changed. */
  movesChanged?: (records: MoveRecord[]) => void;
}

/** The broker leading a group: its serviceId, and its epoch (the leader key's create revision). */
export interface GroupLeader {
  serviceId: string;
  epoch: number;
}

/** The group owning a queue, and the revision its map entry was written at. */
export interface QueueOwner {
  group: string;
  epoch: number;
}

/** What a client is told (MAP_INFO): the map epoch, owners of the queues asked about, every group's brokers. */
export interface MapView {
  epoch: number;
  queues: Record<string, QueueOwner>;
  groups: Record<string, string[]>;
}

const QUEUES = "queues/";
const GROUPS = "groups/";
const RETRY_MS = 1000;
/** A queue counts 1 in its group's weight, plus its rate per this many msg/s. */
const RATE_PER_QUEUE = 1000;

export class QueueMap {
  readonly #options: QueueMapOptions;
  readonly #client: Etcd3;
  readonly #keys: Namespace;
  readonly #owners = new Map<string, QueueOwner>();
  /** group → serviceId → address. */
  readonly #members = new Map<string, Map<string, string>>();
  /** group → queue → msg/s, as its master last published. */
  readonly #load = new Map<string, Record<string, number>>();
  /** queue → its move record (in progress, or the last one). */
  readonly #moves = new Map<string, MoveRecord>();
  /** group → its leader, as the leader keys say. */
  readonly #leaders = new Map<string, GroupLeader>();
  #revision = 0;
  #watchers: Watcher[] = [];
  #lease: Lease | null = null;
  #stopped = false;
  #timer: ReturnType<typeof setTimeout> | null = null;
  /** Settles once the map was read (or the broker stopped trying). */
  readonly ready: Promise<void>;
  #markReady!: () => void;

  constructor(options: QueueMapOptions) {
    this.#options = options;
    this.#client = connectEtcd(options.endpoints, Math.min(1500, (options.leaseTtlSeconds * 1000) / 2));
    this.#keys = this.#client.namespace(options.prefix);
    this.ready = new Promise((resolve) => (this.#markReady = resolve));
  }

  /** The newest map revision this broker has seen. */
  get epoch(): number {
    return this.#revision;
  }

  /** Registers this broker as a member of its group, reads the map and follows it. */
  start(): void {
    this.#register();
    this.#read();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#markReady();
    await Promise.all(this.#watchers.map((watcher) => watcher.cancel().catch(() => undefined)));
    // Revoking the lease removes the member key at once: clients stop dialling this broker.
    await this.#lease?.revoke().catch(() => undefined);
    this.#client.close();
  }

  /** The group that owns `queue`, or undefined when it is not placed (or the map is not read yet). */
  owner(queue: string): QueueOwner | undefined {
    return this.#owners.get(queue);
  }

  /** Every group with at least one live broker, and their addresses. */
  groups(): Record<string, string[]> {
    const groups: Record<string, string[]> = {};
    for (const [group, members] of this.#members) if (members.size > 0) groups[group] = [...members.values()].sort();
    return groups;
  }

  /** The broker leading `group` (null: none, or not seen yet). */
  leader(group: string): GroupLeader | null {
    return this.#leaders.get(group) ?? null;
  }

  /** Where clients and peers reach a member of `group` (`host:port@serviceId`), or null. */
  address(group: string, serviceId: string): string | null {
    return this.#members.get(group)?.get(serviceId) ?? null;
  }

  /** True for a broker registered in any group of this deployment (it may open a peer link for a move). */
  isMember(serviceId: string): boolean {
    for (const members of this.#members.values()) if (members.has(serviceId)) return true;
    return false;
  }

  /** Each group's queues with their message rates (msg/s), as its master last published them. */
  loads(): Map<string, Record<string, number>> {
    return new Map(this.#load);
  }

  /** Every queue's move record: in progress, or its last one. */
  moves(): MoveRecord[] {
    return [...this.#moves.values()];
  }

  move(queue: string): MoveRecord | undefined {
    return this.#moves.get(queue);
  }

  /**
   * Records a move of `queue` to `to`, by one transaction that holds only while the queue's map
   * entry and its last move record are as this broker sees them. Throws MOVE_REFUSED with why.
   */
  async requestMove(queue: string, to: string, requestedBy: string, now: number): Promise<MoveRecord> {
    await this.ready;
    const owner = this.#owners.get(queue);
    const refuse = (why: string) => new KittenError("MOVE_REFUSED", `Cannot move queue "${queue}" to group "${to}": ${why}`);
    if (!owner) throw refuse("no group owns it yet (a queue is placed when a client first uses it)");
    if (owner.group === to) throw refuse("that group owns it already");
    if (!this.groups()[to]) throw refuse(`no broker of group "${to}" is registered in etcd`);
    const leader = this.#leaders.get(owner.group);
    if (!leader) throw refuse(`its group "${owner.group}" has no master now`);
    if (!this.#leaders.get(to)) throw refuse(`group "${to}" has no master now`);
    const last = this.#moves.get(queue);
    if (last?.state === "copying") throw refuse(`a move to group "${last.to}" is in progress (asked at ${new Date(last.requestedAt).toISOString()})`);
    const record = newMove(queue, owner.group, to, leader.epoch, requestedBy, now);
    const created = await createMove(this.#keys, record, owner.epoch, last?.revision ?? 0);
    if (!created) throw refuse("its map entry or its move record changed meanwhile; ask again");
    this.#moves.set(queue, created);
    this.#options.movesChanged?.([created]);
    return created;
  }

  /** Progress or a roll-back of a move (null: the record changed meanwhile, another broker acted first). */
  async updateMove(record: MoveRecord, changes: Partial<MoveRecord>): Promise<MoveRecord | null> {
    const updated = await updateMove(this.#keys, record, changes);
    if (updated) this.#keep(updated);
    return updated;
  }

  /** The switch of ownership (move_records.ts); null when it did not hold. */
  async switchOwner(record: MoveRecord, changes: Partial<MoveRecord>): Promise<MoveRecord | null> {
    const done = await switchOwner(this.#keys, record, changes);
    if (!done) return null;
    this.#keep(done);
    this.#setOwner(record.queue, { group: record.to, epoch: done.revision }, done.revision);
    this.#options.changed([record.queue]);
    return done;
  }

  /** A record this broker wrote: kept unless the watch brought a newer one first. */
  #keep(record: MoveRecord): void {
    const known = this.#moves.get(record.queue);
    if (known && known.revision > record.revision) return;
    this.#moves.set(record.queue, record);
    this.#options.movesChanged?.([record]);
  }

  /** Queue counts and weights per group (status, metrics, placement). */
  placed(): Map<string, string[]> {
    const byGroup = new Map<string, string[]>();
    for (const [queue, { group }] of this.#owners) {
      const list = byGroup.get(group) ?? [];
      list.push(queue);
      byGroup.set(group, list);
    }
    return byGroup;
  }

  view(queues: Iterable<string>): MapView {
    const owners: Record<string, QueueOwner> = {};
    for (const queue of queues) {
      const owner = this.#owners.get(queue);
      if (owner) owners[queue] = { ...owner };
    }
    return { epoch: this.#revision, queues: owners, groups: this.groups() };
  }

  /**
   * The owner of `queue`, placing it first when it has none: on `wanted` (`channels[q].group`),
   * else on the live group of least weight (each queue 1, plus its rate per 1,000 msg/s).
   */
  async place(queue: string, wanted?: string): Promise<QueueOwner> {
    await this.ready;
    const known = this.#owners.get(queue);
    if (known) return known;
    const group = wanted ?? this.#lightestGroup();
    const key = QUEUES + queue;
    const keys = this.#keys;
    let result;
    try {
      result = await keys.if(key, "Create", "==", 0)
        .then(keys.put(key).value(JSON.stringify({ group })))
        .else(keys.get(key))
        .commit();
    } catch (error) {
      throw new KittenError("STORE_UNAVAILABLE", `Cannot place queue "${queue}" on a group: etcd did not answer: ${(error as Error).message}`);
    }
    if (result.succeeded) {
      const revision = Number(result.header.revision);
      this.#setOwner(queue, { group, epoch: revision }, revision);
      this.#options.log("info", `queue "${queue}" placed on group "${group}" (map epoch ${revision})`);
    } else {
      // A transaction's reads carry the whole key (the namespace strips only its own calls' keys).
      const kv = result.responses[0]?.response_range?.kvs[0];
      const placed = kv ? (parseJson(kv.value.toString()) as { group?: unknown } | null)?.group : undefined;
      if (kv && typeof placed === "string") this.#setOwner(queue, { group: placed, epoch: Number(kv.mod_revision) }, Number(kv.mod_revision));
    }
    const owner = this.#owners.get(queue);
    if (!owner) throw new KittenError("STORE_UNAVAILABLE", `Cannot place queue "${queue}": its map entry was removed while it was placed; try again`);
    return owner;
  }

  /** A master tells the others how busy its group's queues are (msg/s each), for placement. */
  async publishLoad(rates: Record<string, number>): Promise<void> {
    await this.#keys.put(`${GROUPS}${this.#options.group}/load`).value(JSON.stringify(rates));
  }

  #lightestGroup(): string {
    const weights = new Map<string, number>();
    for (const group of Object.keys(this.groups())) weights.set(group, 0);
    if (weights.size === 0) return this.#options.group; // the map was read before any member key
    for (const [queue, { group }] of this.#owners) {
      if (!weights.has(group)) continue;
      const rate = this.#load.get(group)?.[queue] ?? 0;
      weights.set(group, weights.get(group)! + 1 + rate / RATE_PER_QUEUE);
    }
    let best = "";
    let bestWeight = Infinity;
    for (const [group, weight] of [...weights].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      if (weight < bestWeight) [best, bestWeight] = [group, weight];
    }
    return best;
  }

  // ── following etcd ─────────────────────────────────────────────────────────────────────────

  #retry(what: string, error: unknown, again: () => void): void {
    if (this.#stopped) return;
    this.#options.log("warn", `Cannot ${what} in etcd: ${(error as Error)?.message ?? error}: trying again in ${RETRY_MS} ms`);
    this.#timer = setTimeout(again, RETRY_MS);
  }

  #register(): void {
    if (this.#stopped) return;
    const lease = this.#client.lease(this.#options.leaseTtlSeconds);
    this.#lease = lease;
    lease.on("lost", (error: Error) => {
      if (this.#stopped || this.#lease !== lease) return;
      // etcd3 may say a lease is lost more than once: one new lease, not one per time (the others
      // would be kept alive for nothing).
      this.#lease = null;
      this.#retry("keep the member key", error, () => this.#register());
    });
    const key = `${GROUPS}${this.#options.group}/members/${this.#options.serviceId}`;
    lease.put(this.#options.prefix + key)
      .value(JSON.stringify({ address: this.#options.address() }))
      .catch((error: unknown) => {
        if (this.#lease !== lease) return;
        this.#lease = null;
        lease.revoke().catch(() => undefined);
        this.#retry("register the member key", error, () => this.#register());
      });
  }

  async #read(): Promise<void> {
    try {
      const [queues, groups, moves] = await Promise.all([
        this.#keys.getAll().prefix(QUEUES).exec(),
        this.#keys.getAll().prefix(GROUPS).exec(),
        this.#keys.getAll().prefix(MOVES).exec(),
      ]);
      if (this.#stopped) return;
      const revisions = [queues, groups, moves].map((answer) => Number(answer.header.revision));
      const revision = Math.min(...revisions);
      for (const kv of [...queues.kvs, ...groups.kvs, ...moves.kvs]) this.#apply(kv);
      this.#revision = Math.max(this.#revision, ...revisions);
      this.#markReady();
      this.#options.changed([...this.#owners.keys()]);
      this.#options.movesChanged?.([...this.#moves.values()]);
      this.#follow(revision + 1);
    } catch (error) {
      this.#retry("read the queue map", error, () => this.#read());
    }
  }

  /** One watch per prefix from `revision`; a broken watch reads the map again and follows from there. */
  async #follow(revision: number): Promise<void> {
    try {
      for (const prefix of [QUEUES, GROUPS, MOVES]) {
        const watcher = await this.#keys.watch().prefix(prefix).startRevision(String(revision)).create();
        if (this.#stopped) return void watcher.cancel().catch(() => undefined);
        this.#watchers.push(watcher);
        watcher.on("put", (kv: IKeyValue) => this.#changed(kv, false));
        watcher.on("delete", (kv: IKeyValue) => this.#changed(kv, true));
        watcher.on("error", (error: Error) => this.#rewatch(error));
      }
    } catch (error) {
      this.#rewatch(error as Error);
    }
  }

  #rewatch(error: Error): void {
    const watchers = this.#watchers;
    this.#watchers = [];
    for (const watcher of watchers) watcher.cancel().catch(() => undefined);
    this.#retry("watch the queue map", error, () => this.#read());
  }

  #changed(kv: IKeyValue, deleted: boolean): void {
    try {
      const queue = deleted ? this.#remove(kv) : this.#apply(kv);
      this.#revision = Math.max(this.#revision, Number(kv.mod_revision));
      const key = kv.key.toString();
      if (key.startsWith(MOVES)) {
        const record = this.#moves.get(key.slice(MOVES.length));
        if (record) this.#options.movesChanged?.([record]);
        return;
      }
      // A group's leader changed: moves out of or into it may have to be rolled back or resumed.
      if (key.endsWith("/leader")) this.#options.movesChanged?.([...this.#moves.values()]);
      if (queue !== null) this.#options.changed([queue]);
    } catch (error) {
      this.#options.log("error", `Cannot apply a change of the queue map: ${(error as Error).message}`);
    }
  }

  /** Applies one key; returns the queue it names (a queue entry), else null. */
  #apply(kv: IKeyValue): string | null {
    const key = kv.key.toString(); // the namespace strips the prefix
    const value = parseJson(kv.value.toString());
    const revision = Number(kv.mod_revision);
    if (key.startsWith(QUEUES)) {
      const queue = key.slice(QUEUES.length);
      const group = (value as { group?: unknown } | null)?.group;
      if (typeof group !== "string") {
        this.#options.log("warn", `etcd key "${this.#options.prefix}${key}" names no group: ignored`);
        return null;
      }
      this.#setOwner(queue, { group, epoch: revision }, revision);
      return queue;
    }
    if (key.startsWith(MOVES)) {
      const record = parseMoveRecord(kv.value.toString(), revision);
      if (record) this.#moves.set(record.queue, record);
      else this.#options.log("warn", `etcd key "${this.#options.prefix}${key}" is not a move record: ignored`);
      return null;
    }
    const [, group, kind, serviceId] = key.split("/");
    if (!group) return null;
    if (kind === "leader") {
      this.#leaders.set(group, { serviceId: kv.value.toString(), epoch: Number(kv.create_revision) });
    } else if (kind === "members" && serviceId) {
      const address = (value as { address?: unknown } | null)?.address;
      if (typeof address !== "string") return null;
      const members = this.#members.get(group) ?? new Map<string, string>();
      members.set(serviceId, address);
      this.#members.set(group, members);
    } else if (kind === "load" && value !== null && typeof value === "object") {
      this.#load.set(group, value as Record<string, number>);
    }
    return null;
  }

  #remove(kv: IKeyValue): string | null {
    const key = kv.key.toString(); // the namespace strips the prefix
    if (key.startsWith(QUEUES)) {
      const queue = key.slice(QUEUES.length);
      this.#owners.delete(queue);
      return queue;
    }
    if (key.startsWith(MOVES)) {
      this.#moves.delete(key.slice(MOVES.length));
      return null;
    }
    const [, group, kind, serviceId] = key.split("/");
    if (group && kind === "leader") this.#leaders.delete(group);
    if (group && kind === "members" && serviceId) this.#members.get(group)?.delete(serviceId);
    return null;
  }

  /** An older answer (a placement's own reply racing its watch event) never replaces a newer entry. */
  #setOwner(queue: string, owner: QueueOwner, revision: number): void {
    // The map's epoch is never below the epoch of an entry it holds.
    this.#revision = Math.max(this.#revision, revision);
    const current = this.#owners.get(queue);
    if (current && current.epoch > revision) return;
    this.#owners.set(queue, owner);
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}
