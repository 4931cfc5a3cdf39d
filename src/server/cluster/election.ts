/**
 * Master election through etcd: one leader key, held by an etcd lease, taken only by an etcd
 * transaction that succeeds while nobody holds it (`create_revision == 0`). etcd decides; this file
 * only asks and listens.
 *
 * - The epoch is the leader key's create revision. etcd revisions only grow, and a new leader key
 *   can only be created after the previous one is gone, so every leader's epoch is strictly higher
 *   than every earlier leader's: a fencing token issued by etcd.
 * - The leader key lives as long as the broker's lease. The lease keeper gives the lease up a margin
 *   before etcd could expire it when renewals stop being confirmed, and the election then calls
 *   `steppedDown` first: an old leader has stopped before a new one can be elected.
 * - Every etcd call has a deadline and every failure is logged and retried with backoff; nothing
 *   throws out of a timer or a gRPC callback. `publishIsr`/`readIsr` reject to their caller.
 */
import type { Etcd3, IKeyValue, Namespace, Watcher } from "etcd3";
import { KittenError } from "../../protocol/errors.ts";
import { LeaseKeeper } from "./lease_keeper.ts";
import { connectEtcd, EndpointRenewals } from "./etcd_client.ts";

export interface ElectionOptions {
  /** etcd client URLs (`cluster.etcd.endpoints`), e.g. "http://127.0.0.1:2379". */
  endpoints: string[];
  /** TTL of the broker's etcd lease (`cluster.etcd.leaseTtlSeconds`, default 3). */
  leaseTtlSeconds: number;
  /** Prefix of the deployment's keys (`cluster.etcd.prefix`), e.g. "kitten-mq/". */
  prefix: string;
  /** The group (`cluster.group`) this election chooses a master for: its keys are `<prefix>groups/<group>/…`. */
  group: string;
  /** This broker's serviceId, written as the leader key's value. */
  candidate: string;
  log: (level: "info" | "warn" | "error", message: string) => void;
  /** A monotonic clock in ms (default `performance.now`); only differences are used. */
  now?: () => number;
}

export interface LeaderInfo {
  id: string;
  epoch: number;
}

export interface ElectionEvents {
  /** This broker leads; `epoch` is strictly higher than every earlier leader's. */
  elected(epoch: number): void;
  /** Stop acting as master now (called before the lease can expire). Follows every `elected` once. */
  steppedDown(reason: string): void;
  /** Who leads as observed in etcd, called when it changes. */
  leader(current: LeaderInfo | null): void;
}

export interface IsrRecord {
  epoch: number;
  members: string[];
}

/**
 * Where brokers that predate groups keep the leader key and the in-sync set. The group "default"
 * is their group: its leader takes its key only while `<prefix>leader` is free and writes both
 * keys (one transaction, one lease, one revision), and its in-sync set under both names. So
 * during an upgrade an older broker follows a leader of this version, and the reverse: never two
 * masters.
 */
const LEGACY_LEADER_KEY = "leader";
const LEGACY_ISR_KEY = "isr";
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 2000;
const WATCH_RETRY_MS = 1000;

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export class Election {
  readonly #options: ElectionOptions;
  readonly #events: ElectionEvents;
  readonly #now: () => number;
  readonly #callTimeoutMs: number;
  #client: Etcd3 | null = null;
  #renewals: EndpointRenewals | null = null;
  #keys: Namespace | null = null;
  #keeper: LeaseKeeper | null = null;
  #watcher: Watcher | null = null;

  #started = false;
  #stopped = false;
  #eligible = false;
  #isLeader = false;
  #epoch: number | null = null;
  /** The lease the leader key was created with while this broker leads. */
  #leaderLease: string | null = null;
  #leader: LeaderInfo | null = null;
  /** Revision of the newest observation of the leader key, so an older answer never wins. */
  #observedRevision = 0;

  #busy = false;
  #dirty = false;
  #failures = 0;
  #etcdFailing = false;
  #retryTimer: ReturnType<typeof setTimeout> | null = null;
  #pollTimer: ReturnType<typeof setInterval> | null = null;
  #watchRetryTimer: ReturnType<typeof setTimeout> | null = null;
  #watchDown = false;
  readonly #leaderKey: string;
  readonly #isrKey: string;
  /** The group "default" also holds the keys of brokers that predate groups (LEGACY_LEADER_KEY). */
  readonly #holdsLegacyKeys: boolean;
  #legacyWarned = false;

  constructor(options: ElectionOptions, events: ElectionEvents) {
    if (options.endpoints.length === 0) throw new RangeError("Cannot start the etcd election: cluster.etcd.endpoints is empty");
    if (!Number.isInteger(options.leaseTtlSeconds) || options.leaseTtlSeconds < 1) {
      throw new RangeError(`Cannot start the etcd election: cluster.etcd.leaseTtlSeconds must be an integer >= 1: current value is ${options.leaseTtlSeconds}`);
    }
    this.#options = options;
    this.#events = events;
    this.#leaderKey = `groups/${options.group}/leader`;
    this.#isrKey = `groups/${options.group}/isr`;
    this.#holdsLegacyKeys = options.group === "default";
    this.#now = options.now ?? (() => performance.now());
    // etcd answers in milliseconds; a call left unanswered for half a TTL is as good as failed
    // (etcd3 then retries it on another node), and bounding it keeps a hung etcd node from
    // freezing the election.
    this.#callTimeoutMs = Math.min(1500, (options.leaseTtlSeconds * 1000) / 2);
  }

  get isLeader(): boolean {
    return this.#isLeader;
  }

  /** This broker's epoch while it leads, else null. */
  get epoch(): number | null {
    return this.#epoch;
  }

  /** The leader as last observed in etcd (this broker included), or null when none is known. */
  get leader(): LeaderInfo | null {
    return this.#leader;
  }

  /** Connects to etcd, grants a lease and watches the leader key; campaigns while eligible. */
  start(): void {
    if (this.#started) return;
    this.#started = true;
    const timeout = this.#callTimeoutMs;
    this.#client = connectEtcd(this.#options.endpoints, timeout);
    this.#keys = this.#client.namespace(this.#options.prefix);
    const renewals = (this.#renewals = new EndpointRenewals(this.#options.endpoints));
    this.#keeper = new LeaseKeeper(this.#client, {
      ttlSeconds: this.#options.leaseTtlSeconds,
      endpointCount: renewals.count,
      renewThrough: (index, id, deadlineMs) => renewals.renew(index, id, deadlineMs),
      now: this.#now,
      log: this.#options.log,
      onLost: (reason) => this.#leaseLost(reason),
    });
    this.#watch();
    // The watch is the fast path; this re-read catches what a broken watch stream missed.
    this.#pollTimer = setInterval(() => this.#kick(), this.#options.leaseTtlSeconds * 1000);
    this.#kick();
  }

  /**
   * Only eligible (in-sync) brokers stand for election. `false` withdraws a candidacy that has not
   * won; a leader that becomes ineligible keeps leading (the broker decides whether to resign).
   */
  setEligible(eligible: boolean): void {
    if (this.#eligible === eligible) return;
    this.#eligible = eligible;
    this.#kick();
  }

  /**
   * A leader gives up: `steppedDown("resigned")` first, then the leader key is deleted so another
   * broker can be elected at once. The candidacy is withdrawn until `setEligible(true)`.
   */
  async resign(): Promise<void> {
    this.#eligible = false;
    const epoch = this.#epoch;
    if (!this.#isLeader || epoch === null) return;
    this.#stepDown("resigned");
    await this.#deleteLeaderKey(epoch);
  }

  /** Steps down if leading, revokes the lease when etcd answers in time, closes the client. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#stepDown("stopped");
    for (const timer of [this.#retryTimer, this.#watchRetryTimer]) if (timer) clearTimeout(timer);
    if (this.#pollTimer) clearInterval(this.#pollTimer);
    const watcher = this.#watcher;
    this.#watcher = null;
    await Promise.all([
      this.#keeper?.release(true),
      watcher?.cancel().catch(() => undefined),
    ]);
    this.#client?.close();
    this.#renewals?.close();
  }

  /**
   * Writes the in-sync replica set, in a transaction that succeeds only while this broker's leader
   * key (its epoch) still exists. Rejects with FENCED when this broker does not lead.
   */
  async publishIsr(members: string[]): Promise<void> {
    const epoch = this.#epoch;
    const lease = this.#leaderLease;
    const keys = this.#keys;
    if (!this.#isLeader || epoch === null || lease === null || !keys) {
      throw new KittenError("FENCED", `Cannot publish the in-sync replicas: broker "${this.#options.candidate}" does not lead${this.#describeLeader()}`);
    }
    const record = JSON.stringify({ epoch, members: [...members] } satisfies IsrRecord);
    const writes = [keys.put(this.#isrKey).value(record)];
    if (this.#holdsLegacyKeys) writes.push(keys.put(LEGACY_ISR_KEY).value(record));
    const result = await keys
      .if(this.#leaderKey, "Create", "==", epoch)
      .and(this.#leaderKey, "Lease", "==", lease)
      .then(...writes)
      .else(keys.get(this.#leaderKey))
      .commit();
    if (result.succeeded) return;
    const holder = result.responses[0]?.response_range?.kvs[0];
    this.#observe(holder ? this.#leaderOf(holder) : null, Number(result.header.revision));
    if (this.#epoch === epoch) this.#stepDown(`the leader key no longer is this broker's (epoch ${epoch}, lease ${lease})`);
    throw new KittenError("FENCED", `Cannot publish the in-sync replicas: broker "${this.#options.candidate}" no longer leads (epoch ${epoch})${this.#describeLeader()}`);
  }

  /** The in-sync replica set last published by a leader, or null when none was. */
  async readIsr(): Promise<IsrRecord | null> {
    const keys = this.#keys;
    if (!keys) throw new Error("Cannot read the in-sync replicas: the election is not started");
    const text = await keys.get(this.#isrKey).string();
    if (text === null) return null;
    try {
      const record = JSON.parse(text) as Partial<IsrRecord>;
      if (typeof record.epoch === "number" && Array.isArray(record.members) && record.members.every((m) => typeof m === "string")) {
        return { epoch: record.epoch, members: record.members };
      }
    } catch {
      // reported below
    }
    throw new Error(`Cannot read the in-sync replicas: etcd key "${this.#options.prefix}${this.#isrKey}" holds ${JSON.stringify(text.slice(0, 200))}`);
  }

  #describeLeader(): string {
    const leader = this.#leader;
    return leader ? ` (leader is "${leader.id}" at epoch ${leader.epoch})` : " (no leader known)";
  }

  #leaderOf(kv: IKeyValue): LeaderInfo {
    return { id: kv.value.toString(), epoch: Number(kv.create_revision) };
  }

  /** Runs a reconcile pass now, or once more after the running one. */
  #kick(): void {
    if (this.#stopped || !this.#started) return;
    if (this.#busy) {
      this.#dirty = true;
      return;
    }
    this.#busy = true;
    void this.#reconcile();
  }

  async #reconcile(): Promise<void> {
    try {
      do {
        this.#dirty = false;
        await this.#pass();
      } while (this.#dirty && !this.#stopped);
      this.#failures = 0;
      if (this.#etcdFailing) {
        this.#etcdFailing = false;
        this.#options.log("info", "etcd answers again");
      }
    } catch (error) {
      this.#failures++;
      const delay = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** (this.#failures - 1));
      if (!this.#etcdFailing) {
        this.#etcdFailing = true;
        this.#options.log("warn", `Cannot reach etcd at ${this.#options.endpoints.join(", ")}: ${errorMessage(error)}: retrying with backoff, ${this.#isLeader ? "leading until the lease would run out" : "not a candidate meanwhile"}`);
      }
      if (!this.#stopped) {
        if (this.#retryTimer) clearTimeout(this.#retryTimer);
        this.#retryTimer = setTimeout(() => {
          this.#retryTimer = null;
          this.#kick();
        }, delay);
      }
    } finally {
      this.#busy = false;
    }
  }

  /** One look at etcd: get a lease if needed, then check or take the leader key. */
  async #pass(): Promise<void> {
    const keeper = this.#keeper!;
    const keys = this.#keys!;
    if (keeper.id === null) {
      const id = await keeper.grant();
      if (this.#stopped) {
        await keeper.release(true);
        return;
      }
      this.#options.log("info", `etcd granted lease ${id} (TTL ${this.#options.leaseTtlSeconds} s) to "${this.#options.candidate}"`);
    }
    const leaseId = keeper.id;
    if (leaseId === null) return;

    if (this.#isLeader || !this.#eligible) {
      const read = await keys.get(this.#leaderKey).exec();
      if (this.#stopped) return;
      const kv = read.kvs[0];
      this.#observe(kv ? this.#leaderOf(kv) : null, Number(read.header.revision));
      return;
    }

    const free = keys.if(this.#leaderKey, "Create", "==", 0);
    const claims = [keys.put(this.#leaderKey).value(this.#options.candidate).lease(leaseId)];
    if (this.#holdsLegacyKeys) {
      free.and(LEGACY_LEADER_KEY, "Create", "==", 0);
      claims.push(keys.put(LEGACY_LEADER_KEY).value(this.#options.candidate).lease(leaseId));
    }
    const reads = [keys.get(this.#leaderKey)];
    if (this.#holdsLegacyKeys) reads.push(keys.get(LEGACY_LEADER_KEY));
    const result = await free
      .then(...claims)
      .else(...reads)
      .commit();
    const revision = Number(result.header.revision);
    let mine: number | null = null;
    if (result.succeeded) {
      mine = revision;
    } else {
      const kv = result.responses[0]?.response_range?.kvs[0];
      // Our own key from an earlier attempt whose answer was lost still makes us the leader.
      if (kv && kv.lease === leaseId) mine = Number(kv.create_revision);
      else if (kv) this.#observe(this.#leaderOf(kv), revision);
      else if (this.#holdsLegacyKeys && result.responses[1]?.response_range?.kvs[0]) this.#olderMasterLeads();
      else this.#dirty = true; // deleted between the compare and the read: try again
    }
    if (mine === null) return;
    if (this.#stopped) return;
    if (keeper.id !== leaseId || !this.#eligible) {
      // The lease was given up, or the candidacy withdrawn, while the transaction was in flight.
      await this.#deleteLeaderKey(mine);
      this.#dirty = true;
      return;
    }
    this.#isLeader = true;
    this.#epoch = mine;
    this.#leaderLease = leaseId;
    this.#options.log("info", `"${this.#options.candidate}" elected master through etcd at epoch ${mine}`);
    this.#emit("elected", () => this.#events.elected(mine));
    this.#observe({ id: this.#options.candidate, epoch: mine }, revision);
  }

  /** Records who leads as seen at `revision`; notices a lost leadership and a free seat. */
  #observe(current: LeaderInfo | null, revision: number): void {
    if (revision < this.#observedRevision) return;
    this.#observedRevision = revision;
    const previous = this.#leader;
    const changed = previous?.id !== current?.id || previous?.epoch !== current?.epoch;
    if (changed) {
      this.#leader = current;
      this.#emit("leader", () => this.#events.leader(current ? { ...current } : null));
    }
    if (this.#isLeader && (current?.epoch !== this.#epoch || current?.id !== this.#options.candidate)) {
      this.#stepDown(current ? `etcd shows "${current.id}" leading at epoch ${current.epoch}` : "the leader key was deleted from etcd");
    }
    if (current === null && this.#eligible && !this.#isLeader) this.#kick();
  }

  /** An older broker holds `<prefix>leader`: this one stands again at the next poll, once it is gone. */
  #olderMasterLeads(): void {
    if (this.#legacyWarned) return;
    this.#legacyWarned = true;
    this.#options.log("warn", `an older broker leads through etcd key "${this.#options.prefix}${LEGACY_LEADER_KEY}": "${this.#options.candidate}" stands for election once it is gone (upgrade every broker of the group)`);
  }

  #leaseLost(reason: string): void {
    if (this.#stopped) return;
    if (this.#isLeader) this.#stepDown(reason);
    else this.#options.log("warn", `etcd lease of "${this.#options.candidate}" given up: ${reason}`);
    this.#kick();
  }

  #stepDown(reason: string): void {
    if (!this.#isLeader) return;
    this.#isLeader = false;
    this.#epoch = null;
    this.#leaderLease = null;
    this.#options.log("warn", `"${this.#options.candidate}" steps down as master: ${reason}`);
    this.#emit("steppedDown", () => this.#events.steppedDown(reason));
  }

  /** Deletes the leader key if it still is the one created at `epoch`; failures are logged. */
  async #deleteLeaderKey(epoch: number): Promise<void> {
    const keys = this.#keys;
    if (!keys) return;
    try {
      // The legacy key was created with it (same revision): it goes with it.
      const deletes = [keys.delete().key(this.#leaderKey)];
      if (this.#holdsLegacyKeys) deletes.push(keys.delete().key(LEGACY_LEADER_KEY));
      await keys.if(this.#leaderKey, "Create", "==", epoch).then(...deletes).commit();
    } catch (error) {
      this.#options.log("warn", `Cannot delete the etcd leader key of epoch ${epoch}: ${errorMessage(error)}: it goes when the lease expires`);
    }
  }

  #watch(): void {
    const keys = this.#keys;
    if (!keys || this.#stopped) return;
    const watcher = keys.watch().key(this.#leaderKey).watcher();
    this.#watcher = watcher;
    watcher.on("put", (kv: IKeyValue) => this.#observe(this.#leaderOf(kv), Number(kv.mod_revision)));
    watcher.on("delete", (kv: IKeyValue) => this.#observe(null, Number(kv.mod_revision)));
    // After a reconnect, read the key again rather than trust what the stream replays.
    watcher.on("connected", () => {
      if (this.#watchDown) this.#options.log("info", "etcd watch of the leader key reconnected");
      this.#watchDown = false;
      this.#kick();
    });
    watcher.on("disconnected", (error: Error) => {
      if (this.#watchDown) return;
      this.#watchDown = true;
      this.#options.log("warn", `etcd watch of the leader key disconnected: ${error.message}: reconnecting`);
    });
    watcher.on("error", (error: Error) => {
      if (this.#watcher !== watcher || this.#stopped) return;
      this.#options.log("warn", `etcd watch of the leader key failed: ${error.message}: watching again in ${WATCH_RETRY_MS} ms`);
      this.#watcher = null;
      watcher.cancel().catch(() => undefined);
      this.#watchRetryTimer = setTimeout(() => {
        this.#watchRetryTimer = null;
        this.#watch();
      }, WATCH_RETRY_MS);
    });
  }

  /** Calls a broker callback; what it throws is logged, never thrown into etcd3's streams. */
  #emit(name: keyof ElectionEvents, call: () => void): void {
    try {
      call();
    } catch (error) {
      this.#options.log("error", `The election's "${name}" handler threw: ${errorMessage(error)}`);
    }
  }
}
