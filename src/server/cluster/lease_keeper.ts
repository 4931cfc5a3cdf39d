/**
 * One etcd lease, kept alive by etcd3's keep-alive stream, with a local deadline that does not need
 * etcd to answer: the lease is given up (`onLost`) `stepDownAfterMs` after the last renewal that
 * etcd confirmed, which is before etcd itself can expire it.
 *
 * A renewal counts from the moment its keep-alive request was *sent*, not from when the answer
 * arrived: etcd restarts the TTL when it handles the request, which is after the send, so the
 * send time is a safe lower bound of when the lease will expire.
 *
 * etcd3 sends renewals on one stream to one etcd node and only replaces a silent stream after a
 * whole TTL, too late for the margin. So when a renewal is overdue the keeper also sends single
 * renewals with a short deadline, through each etcd node in turn (a client per node): a master
 * whose etcd node hangs renews through another one instead of stepping down. They do not go through
 * the shared client, whose pool picks a node at random for each call and can pick the hung one
 * every time until the margin runs out.
 */
import type { Etcd3, Lease } from "etcd3";

/** Sends one renewal of lease `id` through one etcd node; resolves with the TTL etcd answers (≤ 0: expired). */
export type RenewThrough = (endpointIndex: number, id: string, deadlineMs: number) => Promise<number>;

export interface LeaseKeeperOptions {
  ttlSeconds: number;
  /** How many etcd nodes the single renewals go through, in turn. */
  endpointCount: number;
  renewThrough: RenewThrough;
  now: () => number;
  log: (level: "info" | "warn" | "error", message: string) => void;
  /** The lease is gone (etcd says so, or no renewal came back in time); a new one must be granted. */
  onLost: (reason: string) => void;
}

/** Keep-alive requests waiting for their answer; more than this means etcd does not answer at all. */
const MAX_UNANSWERED = 8;
/** Single renewals in flight at once while the stream's renewals are overdue. */
const MAX_PROBES = 4;

/**
 * How long after the last confirmed renewal the holder stops trusting its lease: one second before
 * the TTL, or a third of it for TTLs under three seconds, so a holder always stops first.
 */
export function stepDownAfterMs(ttlSeconds: number): number {
  const ttlMs = ttlSeconds * 1000;
  return ttlMs - Math.min(1000, ttlMs / 3);
}

export class LeaseKeeper {
  readonly #client: Etcd3;
  readonly #options: LeaseKeeperOptions;
  readonly #budgetMs: number;
  readonly #overdueMs: number;
  readonly #probeEveryMs: number;
  readonly #probeDeadlineMs: number;
  #lease: Lease | null = null;
  #id: string | null = null;
  #renewedAt = 0;
  #unanswered: number[] = [];
  #deadline: ReturnType<typeof setTimeout> | null = null;
  #probe: ReturnType<typeof setTimeout> | null = null;
  #probesInFlight = 0;
  #nextEndpoint = 0;
  #renewalFailing = false;

  constructor(client: Etcd3, options: LeaseKeeperOptions) {
    this.#client = client;
    this.#options = options;
    this.#budgetMs = stepDownAfterMs(options.ttlSeconds);
    // etcd3 renews every TTL/3; a quarter of an interval more without an answer is overdue.
    const intervalMs = (options.ttlSeconds * 1000) / 3;
    this.#overdueMs = intervalMs * 1.25;
    this.#probeEveryMs = intervalMs / 6;
    this.#probeDeadlineMs = intervalMs / 2;
  }

  /** The etcd lease id while a lease is held, else null. */
  get id(): string | null {
    return this.#id;
  }

  /** When (by `now()`) the last confirmed renewal was sent; 0 when no lease is held. */
  get renewedAt(): number {
    return this.#id === null ? 0 : this.#renewedAt;
  }

  /** Grants a new lease (rejects when etcd cannot grant one). Only call while none is held. */
  async grant(): Promise<string> {
    const sentAt = this.#options.now();
    const lease = this.#client.lease(this.#options.ttlSeconds);
    // Attached before the grant answers: etcd3 emits "lost" for a failed grant too.
    lease.on("lost", (error: Error) => this.#lose(lease, `etcd reports the lease lost: ${error.message}`));
    lease.on("keepaliveFired", () => {
      if (lease !== this.#lease) return;
      if (this.#unanswered.length < MAX_UNANSWERED) this.#unanswered.push(this.#options.now());
    });
    // Answers come back in request order on one stream; a new stream starts a new queue (requests
    // lost with the old one get no answer).
    lease.on("keepaliveEstablished", () => {
      if (lease === this.#lease) this.#unanswered = [];
    });
    lease.on("keepaliveSucceeded", () => {
      if (lease !== this.#lease) return;
      const sent = this.#unanswered.shift();
      if (sent !== undefined && sent > this.#renewedAt) this.#renewedAt = sent;
      if (this.#renewalFailing) {
        this.#renewalFailing = false;
        this.#options.log("info", `etcd renews the lease ${this.#id} again`);
      }
      this.#armDeadline();
    });
    // etcd3 types this argument as a keep-alive response; it is the error that broke the stream.
    lease.on("keepaliveFailed", (failure: unknown) => {
      if (lease !== this.#lease) return;
      this.#unanswered = [];
      if (this.#renewalFailing) return;
      this.#renewalFailing = true;
      const left = Math.max(0, Math.round(this.#renewedAt + this.#budgetMs - this.#options.now()));
      this.#options.log("warn", `Cannot renew the etcd lease ${this.#id}: ${failure instanceof Error ? failure.message : String(failure)}: giving it up in ${left} ms unless etcd answers`);
    });
    let id: string;
    try {
      id = await lease.grant();
    } catch (error) {
      lease.release();
      throw error;
    }
    this.#lease = lease;
    this.#id = id;
    this.#renewedAt = sentAt;
    this.#unanswered = [];
    this.#renewalFailing = false;
    this.#armDeadline();
    return id;
  }

  /**
   * Gives the lease up: stops renewing and revokes it (so what it holds is deleted at once) when
   * `revoke` is set; the revoke is bounded by the client's call deadline and never rejects.
   */
  async release(revoke: boolean): Promise<void> {
    const lease = this.#lease;
    this.#clear();
    if (!lease) return;
    if (!revoke) {
      lease.release();
      return;
    }
    await lease.revoke().catch((error: Error) => {
      this.#options.log("warn", `Cannot revoke the etcd lease: ${error.message}: etcd expires it within its TTL`);
    });
  }

  #armDeadline(): void {
    if (this.#deadline) clearTimeout(this.#deadline);
    const lease = this.#lease;
    if (!lease) return;
    this.#armProbe(lease, this.#renewedAt + this.#overdueMs);
    const wait = Math.max(0, this.#renewedAt + this.#budgetMs - this.#options.now());
    this.#deadline = setTimeout(() => {
      this.#deadline = null;
      if (lease !== this.#lease) return;
      const silentMs = this.#options.now() - this.#renewedAt;
      if (silentMs < this.#budgetMs) return this.#armDeadline();
      this.#lose(lease, `no lease renewal confirmed by etcd for ${Math.round(silentMs)} ms (TTL ${this.#options.ttlSeconds} s): the lease may expire any moment`);
    }, wait);
  }

  #armProbe(lease: Lease, at: number): void {
    if (this.#probe) clearTimeout(this.#probe);
    this.#probe = setTimeout(() => {
      this.#probe = null;
      if (lease !== this.#lease) return;
      if (this.#probesInFlight < MAX_PROBES) this.#sendProbe(lease);
      // Several tries before the margin runs out, so one that lands on a hung node is not fatal.
      this.#armProbe(lease, this.#options.now() + this.#probeEveryMs);
    }, Math.max(0, at - this.#options.now()));
  }

  #sendProbe(lease: Lease): void {
    const id = this.#id;
    if (id === null) return;
    this.#probesInFlight++;
    const sentAt = this.#options.now();
    const endpoint = this.#nextEndpoint;
    this.#nextEndpoint = (endpoint + 1) % Math.max(1, this.#options.endpointCount);
    this.#options
      .renewThrough(endpoint, id, this.#probeDeadlineMs)
      .then((ttl) => {
        if (lease !== this.#lease) return;
        if (ttl <= 0) return this.#lose(lease, `etcd reports the lease ${id} expired`);
        if (sentAt <= this.#renewedAt) return;
        this.#renewedAt = sentAt;
        if (this.#renewalFailing) {
          this.#renewalFailing = false;
          this.#options.log("info", `etcd renews the lease ${id} again (through a single renewal)`);
        }
        this.#armDeadline();
      })
      // No answer in time (or a node that is down) only means this try failed; the next goes elsewhere.
      .catch(() => undefined)
      .finally(() => {
        this.#probesInFlight--;
      });
  }

  #lose(lease: Lease, reason: string): void {
    if (lease !== this.#lease) return;
    this.#clear();
    // Revoking frees the leader key at once if etcd still has the lease (it answers again before the
    // TTL ran out); when it cannot be reached the call fails after its deadline and etcd expires it.
    lease.revoke().catch(() => undefined);
    this.#options.onLost(reason);
  }

  #clear(): void {
    if (this.#deadline) clearTimeout(this.#deadline);
    if (this.#probe) clearTimeout(this.#probe);
    this.#deadline = null;
    this.#probe = null;
    this.#lease = null;
    this.#id = null;
    this.#unanswered = [];
  }
}
