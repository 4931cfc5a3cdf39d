/**
 * A queue move's link to the target group's master (outgoing.ts): the master found in the queue
 * map, linked to as a peer (peer_link.ts), and asked to take the move (MOVE_BEGIN). What fails a
 * link before the target takes the move often passes within moments (the target group electing
 * its master, a target whose queue map has not shown it the source yet and refuses a peer it
 * does not know, a port refusing connections), so such a link is made again every
 * LINK_RETRY_MS, to whichever broker the map names then. The move decides how long to keep
 * trying, and what a link that ends after the target took the move means.
 */
import { type Host, isErrorCode, OP, parseHost, shouldResend } from "../../protocol/mod.ts";
import type { MoveRecord } from "../cluster/move_records.ts";
import type { QueueMap } from "../cluster/queue_map.ts";
import { PeerLink } from "./peer_link.ts";

/** How soon a link that failed before the target took the move is made again. */
export const LINK_RETRY_MS = 250;

export interface TargetLinkHost {
  readonly serviceId: string;
  readonly keysDirectory: string;
  readonly keysName: string;
  readonly maxFrameSize: number;
  readonly map: QueueMap;
  log(level: "info" | "warn" | "error", message: string): void;
}

export interface TargetLinkEvents {
  /** The target's master took the move (OK to MOVE_BEGIN). */
  taken(): void;
  /** A frame of the target after it took the move (MOVE_ACK, ERROR). */
  frame(value: unknown[]): void;
  /** The link ended after the target took the move. */
  lost(reason: string): void;
}

export class TargetLink {
  #link: PeerLink | null = null;
  #taken = false;
  /** The last entry written before the link ended (MOVE_BEGIN's `resume`), or null for a first link. */
  #resume: number | null = null;
  #retry: ReturnType<typeof setTimeout> | null = null;
  #closed = false;
  /** Why the last try failed (null: none failed since the last time the target took the move). */
  failure: string | null = null;

  constructor(readonly host: TargetLinkHost, readonly record: MoveRecord, readonly events: TargetLinkEvents) {}

  /**
   * Links to the target group's master and asks it to take the move; `resume`: the link before
   * ended after it took the move, and it keeps what it holds of the queue; the entries written
   * again go up to that seq (the target may hold them already). `refused`: why the target refused
   * what it streamed (a refusal that waiting fixes): the link is made again after LINK_RETRY_MS.
   */
  open(resume: number | null, refused: string | null = null): void {
    this.#resume = resume;
    this.#taken = false;
    const link = this.#link;
    this.#link = null;
    link?.close(); // one that still runs (its target refused what waiting fixes)
    // A target that refused what waiting fixes is asked again shortly, not in a loop that takes
    // the CPU its group needs to get its slaves back in sync.
    if (refused === null) return this.#try();
    this.failure = refused; // the move logged it
    this.#tryLater();
  }

  /** Bytes written and not yet taken by the socket. */
  get pendingBytes(): number {
    return this.#link?.pendingBytes ?? 0;
  }

  /** Writes frames once the target took the move (dropped otherwise: the move writes them again). */
  writeFramed(bytes: Uint8Array): void {
    if (this.#taken) this.#link?.writeFramed(bytes);
  }

  close(): void {
    this.#closed = true;
    if (this.#retry) clearTimeout(this.#retry);
    this.#link?.close();
    this.#link = null;
  }

  #try(): void {
    if (this.#closed) return;
    const { map, serviceId } = this.host;
    const record = this.record;
    const leader = map.leader(record.to);
    const address = leader ? map.address(record.to, leader.serviceId) : null;
    if (!address) return this.#failed(`group "${record.to}" has no master with an address in etcd`);
    let host: Host;
    try {
      host = parseHost(address);
    } catch (error) {
      // Run from a timer: a bad address in etcd must fail this try, not the broker.
      return this.#failed(`the address of group "${record.to}"'s master in etcd cannot be read: ${(error as Error).message}`);
    }
    if (this.failure === null) this.host.log("info", `move of "${record.queue}" to group "${record.to}": linking to ${address}`);
    const link: PeerLink = new PeerLink(host, {
      serviceId,
      keysDirectory: this.host.keysDirectory,
      keysName: this.host.keysName,
      maxFrameSize: this.host.maxFrameSize,
      welcomed: (welcome) => {
        if (this.#link !== link) return;
        if (welcome.role !== "master") return this.#failed(`"${address}" is not the master of group "${record.to}"`);
        const resume = this.#resume === null ? {} : { resume: this.#resume };
        link.write([OP.MOVE_BEGIN, 0, { queue: record.queue, move: record.id, ...resume }]);
      },
      frame: (value) => {
        if (this.#link !== link) return;
        if (!this.#taken && value[0] === OP.OK) {
          this.#taken = true;
          this.events.taken();
          this.failure = null;
          return;
        }
        // A refusal that waiting fixes (a group whose slaves are not back in sync yet): asked again shortly.
        if (!this.#taken && value[0] === OP.ERROR && isErrorCode(value[2]) && shouldResend(value[2])) {
          return this.#failed(`the target refused: ${value[2]}: ${String(value[3])}`);
        }
        this.events.frame(value);
      },
      ended: (error) => {
        if (!error || this.#link !== link || this.#closed) return;
        const why = `the link to the target ended: ${error.message}`;
        if (!this.#taken) return this.#failed(why);
        this.#link = null;
        this.#taken = false;
        this.failure = why;
        this.events.lost(why);
      },
    });
    this.#link = link;
  }

  /** The target could not be linked to, or did not take the move yet: try again shortly. */
  #failed(reason: string): void {
    if (this.#closed) return;
    if (reason !== this.failure) this.host.log("warn", `move of "${this.record.queue}" to group "${this.record.to}": ${reason}; linking again`);
    this.failure = reason;
    this.#tryLater();
  }

  /** Closes the link tried last, and links again after LINK_RETRY_MS. */
  #tryLater(): void {
    if (this.#closed) return;
    const link = this.#link;
    this.#link = null;
    link?.close();
    this.#retry ??= setTimeout(() => {
      this.#retry = null;
      this.#try();
    }, LINK_RETRY_MS);
  }
}
