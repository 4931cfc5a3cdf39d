/**
 * A slave's link to its master. It finds the master among `cluster.peers` (the peer whose welcome
 * says "master", highest epoch first), authenticates like a client with the broker's own key pair
 * (`keysDirectory`/`keysName`, pinned by the master under the broker's serviceId), asks for the
 * replication stream (SYNC), applies it, and acknowledges what it stored (REPL_ACK).
 *
 * Its state is what a promotion asks: "in-sync" once the master said so; it stays "in-sync" when
 * the link drops (the master may be dead: this slave holds every message it confirmed), and a
 * newer epoch seen anywhere, or a new catch-up, takes it back.
 */
import { connect, type Socket } from "node:net";
import {
  checkAppend,
  checkConfirmed,
  checkRequeued,
  checkInSync,
  checkRemove,
  checkResume,
  checkSynced,
  type Challenge,
  decode,
  encode,
  frame,
  FrameDecoder,
  type Host,
  isErrorCode,
  KittenError,
  OP,
  opOf,
  parseHost,
  peerMaxFrameSize,
  type WelcomeInfo,
} from "../../protocol/mod.ts";
import { answerChallenge, loadOrCreateKeys } from "../../protocol/keys.ts";
import { PROTOCOL_VERSION } from "../../version.ts";
import type { AppendOp } from "../../protocol/peer_ops.ts";
import { readAppend } from "../../protocol/hot_ops.ts";
import { PendingRemovals } from "./pending_removals.ts";
import { ReadTurns } from "../read_turns.ts";
import type { UpstreamState, UpstreamStatus, UpstreamTarget } from "./upstream_target.ts";

/** Between two peers of one round; a round that found no master backs off up to RETRY_MAX_MS. */
const RETRY_MIN_MS = 50;
const RETRY_MAX_MS = 250;
/** A peer that does not complete the handshake in this time is dropped and the next one tried. */
const HANDSHAKE_MS = 5_000;

export class Upstream {
  state: UpstreamState = "idle";
  #master: Host | null = null;
  #masterEpoch: number | null = null;
  #socket: Socket | null = null;
  #running = false;
  #next = 0;
  #retryMs = RETRY_MIN_MS;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #generation = 0;
  #snapshotReceived = 0;
  #snapshotTotal: number | null = null;
  #synced = false;
  #syncStart = 0;
  #acked = -1;
  /** Highest seq received; acknowledged once everything before it is stored. */
  #received = -1;
  /** Commits still running, in order; the ack of a later entry waits for the earlier ones. */
  #commits: Promise<unknown> = Promise.resolve();
  #pendingCommits = 0;
  #pendingEntries = 0;
  #since = Date.now();
  #catchUp: "position" | "snapshot" | null = null;
  #confirmed = -1;
  readonly #removals = new PendingRemovals();

  constructor(readonly target: UpstreamTarget) {}

  status(): UpstreamStatus {
    return {
      state: this.state,
      master: this.#master?.label ?? null,
      epoch: this.#masterEpoch,
      snapshotReceived: this.#snapshotReceived,
      snapshotTotal: this.#snapshotTotal,
      ackedIndex: this.#acked,
      catchUp: this.#catchUp,
      confirmedIndex: this.#confirmed,
      removalsWaiting: this.#removals.size,
      pending: this.#pendingEntries,
      since: this.#since,
    };
  }

  /** True when a promotion loses nothing the master confirmed (see the file comment). */
  get inSync(): boolean {
    return this.state === "in-sync";
  }

  /** How far behind, for a refused promotion. */
  describe(): string {
    const status = this.status();
    switch (status.state) {
      case "in-sync":
        return `in sync with ${status.master}`;
      case "catching-up":
        return `catching up from ${status.master}: ${status.snapshotReceived} of ${status.snapshotTotal ?? "?"} ` +
          `snapshot messages received, ${status.pending} not stored yet`;
      case "out-of-sync":
        return `out of sync with ${status.master ?? "the master"} since ${new Date(status.since).toISOString()}`;
      default:
        return `not in sync: no master reached among cluster.peers (${this.target.peers.join(", ") || "none"}) ` +
          `since ${new Date(status.since).toISOString()}`;
    }
  }

  start(): void {
    if (this.#running || this.target.peers.length === 0) return;
    this.#running = true;
    this.#setState(this.state === "in-sync" ? "in-sync" : "searching");
    this.#dialNext();
  }

  /**
   * This broker becomes master: every removal it received is part of the log it now leads, so it
   * applies them all.
   */
  applyRemovals(): void {
    this.#removals.applyUpTo(Number.MAX_SAFE_INTEGER, (ids) => this.target.remove(ids));
  }

  /** This broker became master (or stops): the link goes. Its in-sync state is kept for reporting. */
  stop(): void {
    this.#running = false;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#socket?.destroy();
    this.#socket = null;
    this.state = "idle";
  }

  /** A newer master than the one this slave synced with exists: it must catch up again. */
  newerEpoch(epoch: number): void {
    if (this.state === "in-sync" && this.#masterEpoch !== null && epoch > this.#masterEpoch && this.#socket === null) {
      this.#setState("out-of-sync");
    }
  }

  #setState(state: UpstreamState): void {
    if (state === this.state) return;
    this.state = state;
    this.#since = Date.now();
  }

  #schedule(): void {
    if (!this.#running || this.#timer !== null) return;
    // The next peer of the round at once; a whole round without a master backs off.
    const endOfRound = this.#next % this.target.peers.length === 0;
    const wait = endOfRound ? this.#retryMs : RETRY_MIN_MS;
    if (endOfRound) this.#retryMs = Math.min(RETRY_MAX_MS, this.#retryMs * 2);
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#dialNext();
    }, wait);
  }

  /**
   * The election says who leads: a slave that is not streaming from it dials it now instead of
   * waiting for its next round.
   */
  preferMaster(serviceId: string): void {
    if (!this.#running || (this.#master?.serviceId === serviceId && this.#socket !== null)) return;
    const index = this.target.peers.findIndex((peer) => parseHost(peer).serviceId === serviceId);
    if (index < 0) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    const socket = this.#socket;
    this.#socket = null; // its close must not schedule another dial
    socket?.destroy();
    this.#next = index;
    this.#retryMs = RETRY_MIN_MS;
    this.#dialNext();
  }

  #dialNext(): void {
    if (!this.#running) return;
    const peers = this.target.peers;
    const host = parseHost(peers[this.#next++ % peers.length]!);
    this.#dial(host);
  }

  #dial(host: Host): void {
    const socket = connect({ host: host.host, port: host.port });
    socket.setNoDelay(true);
    this.#socket = socket;
    const decoder = new FrameDecoder(peerMaxFrameSize(this.target.maxFrameSize));
    let phase: "hello" | "auth" | "stream" | "done" = "hello";
    const handshake = setTimeout(() => socket.destroy(new Error("no welcome in time")), HANDSHAKE_MS);
    const write = (op: unknown[]) => {
      if (!socket.destroyed) socket.write(frame(encode(op)));
    };
    const fail = (message: string) => {
      this.target.log("warn", `peer=${host.label};${message}`);
      socket.destroy();
    };

    socket.on("connect", () => write([OP.HELLO, PROTOCOL_VERSION, { client: this.target.serviceId, token: host.token, peer: true }]));
    socket.on("error", () => {}); // reported by "close"
    socket.on("close", () => {
      clearTimeout(handshake);
      if (this.#socket !== socket) return;
      this.#socket = null;
      if (phase === "stream") {
        this.target.log("warn", `peer=${host.label};link to master closed;state=${this.state}`);
        // The master may be gone: an in-sync slave keeps that state (it holds everything confirmed).
        if (this.state === "catching-up") this.#setState("out-of-sync");
      }
      phase = "done";
      this.#schedule();
    });
    const receive = (chunk: Uint8Array) => {
      const commits = new ChunkCommits((entries) => (this.#pendingEntries -= entries));
      let last = -1;
      try {
        decoder.each(chunk, (data, start, end) => {
          if (phase === "stream") {
            // Most of the stream is APPENDs: read by hand, the rest by the generic decoder.
            const append = readAppend(data, start, end);
            if (append !== undefined) {
              const seq = this.#append(append, data, start, end, commits);
              if (seq > last) last = seq;
              return true;
            }
          }
          const value = decode(data.subarray(start, end)) as unknown[];
          const op = opOf(value);
          if (phase === "hello") {
            if (op === OP.CHALLENGE) {
              phase = "auth";
              this.#prove(host, value[1] as Challenge).then(write, (error) => fail(`cannot sign the peer challenge: ${error.message}`));
              return true;
            }
          } else if (phase === "auth" && op === OP.WELCOME) {
            clearTimeout(handshake);
            const welcome = value[1] as WelcomeInfo;
            if (welcome.role !== "master") {
              socket.end();
              return false; // a slave: try the next peer
            }
            const known = this.target.epoch();
            if (welcome.epoch < known) {
              // An old master that came back without being demoted: it is told, and fences itself.
              write([OP.FENCE, { epoch: known, master: this.target.serviceId }]);
              fail(`claims master with epoch ${welcome.epoch}, below epoch ${known}: told it is fenced`);
              return false;
            }
            phase = "stream";
            this.#startStream(host, welcome, write);
            return true;
          } else if (phase === "stream") {
            const seq = this.#apply(op, value, commits, data, start, end);
            if (seq > last) last = seq;
            return true;
          }
          if (op === OP.ERROR) {
            const code = isErrorCode(value[2]) ? value[2] : "INTERNAL";
            fail(`refused: ${code}: ${String(value[3])}`);
            return false;
          }
          if (op === OP.ROLE) {
            fail("the master changed role");
            return false;
          }
          return true;
        });
      } catch (error) {
        fail(`cannot apply the replication stream: ${(error as Error).message}`);
        return;
      }
      if (last >= 0) this.#acknowledge(last, commits, write, fail);
    };
    // A catch-up of megabytes must not hold this slave's timers (its etcd lease, its tick) either.
    const reads = new ReadTurns(socket);
    socket.on("data", (chunk: Uint8Array) => {
      const startedAt = performance.now();
      receive(chunk);
      reads.after(startedAt);
    });
  }

  #prove(host: Host, challenge: Challenge): Promise<unknown[]> {
    return answerChallenge(loadOrCreateKeys(this.target.keysDirectory, this.target.keysName), this.target.serviceId, host, challenge);
  }


  #startStream(host: Host, welcome: WelcomeInfo, write: (op: unknown[]) => void): void {
    this.#retryMs = RETRY_MIN_MS;
    if (this.#masterEpoch !== null && welcome.epoch > this.#masterEpoch) this.#setState("out-of-sync");
    this.#master = host;
    this.#masterEpoch = welcome.epoch;
    this.target.sawEpoch(welcome.epoch, host.serviceId ?? host.label);
    this.#generation++;
    this.#snapshotReceived = 0;
    this.#snapshotTotal = null;
    this.#synced = false;
    this.#acked = -1;
    this.#received = -1;
    this.#commits = Promise.resolve();
    this.#pendingCommits = 0;
    this.#catchUp = null;
    this.#confirmed = -1; // told anew by this master
    this.#syncStart = this.target.nextSeq();
    // In sync again only when the master says so: until then this is a catch-up.
    this.#setState("catching-up");
    const position = this.target.position();
    const at = position ? `from index ${position.index}` : "with no position";
    this.target.log("info", `peer=${host.label};master epoch ${welcome.epoch};catching up ${at}`);
    write([OP.SYNC, 0, position ? { epoch: this.target.epoch(), position } : { epoch: this.target.epoch() }]);
  }

  /** Applies one stream frame (its CBOR is `data[start, end)`); returns its seq (-1 for frames without one). */
  #apply(op: number, value: unknown[], commits: ChunkCommits, data: Uint8Array, start: number, end: number): number {
    switch (op) {
      case OP.APPEND:
        return this.#append(checkAppend(value), data, start, end, commits);
      case OP.REMOVE: {
        const [, seq, ids] = checkRemove(value);
        this.target.retain(seq, data.subarray(start, end));
        this.#removals.add(seq, ids);
        this.#removals.applyUpTo(this.#confirmed, (applied) => this.target.remove(applied));
        return seq;
      }
      case OP.REQUEUED:
        this.target.requeued(checkRequeued(value)[1]);
        return -1; // not a log entry: nothing to acknowledge
      case OP.CONFIRMED: {
        const [, index] = checkConfirmed(value);
        if (index > this.#confirmed) this.#confirmed = index;
        this.#removals.applyUpTo(index, (ids) => this.target.remove(ids));
        return -1;
      }
      case OP.RESUME: {
        const [, seq, { from, to, history }] = checkResume(value);
        this.#catchUp = "position";
        this.#synced = true;
        this.#snapshotTotal = to - from;
        this.#removals.dropAfter(from);
        this.target.resumed(from, history);
        this.target.log("info", `peer=${this.#master?.label};catching up from index ${from};${to - from} entries to receive`);
        return seq;
      }
      case OP.SYNCED: {
        const [, seq, { messages, history }] = checkSynced(value);
        this.#catchUp = "snapshot";
        this.#snapshotTotal = messages;
        this.#synced = true;
        this.#removals.clear(); // the snapshot holds what the master held: earlier removals are in it
        this.target.synced(this.#generation, this.#syncStart, seq, history);
        return seq;
      }
      case OP.IN_SYNC: {
        const [, { inSync, epoch }] = checkInSync(value);
        this.#masterEpoch = epoch;
        this.#setState(inSync ? "in-sync" : "out-of-sync");
        this.target.log(inSync ? "info" : "warn", `peer=${this.#master?.label};${inSync ? "in sync" : "out of sync"};epoch=${epoch}`);
        return -1;
      }
      case OP.ERROR:
        throw new KittenError(isErrorCode(value[2]) ? value[2] : "INTERNAL", String(value[3]));
      case OP.ROLE:
        throw new KittenError("NOT_IN_SYNC", "Cannot follow the master: it changed role");
      default:
        return -1; // OK of SYNC, PONG
    }
  }

  /** Stores one APPEND (its frame is `data[start, end)`); returns its seq (-1 for a snapshot entry). */
  #append(append: AppendOp, data: Uint8Array, start: number, end: number, commits: ChunkCommits): number {
    if (!this.#synced) this.#snapshotReceived++;
    const stored = this.target.append(append, this.#synced ? 0 : this.#generation);
    if (stored instanceof Promise) {
      this.#pendingEntries++;
      commits.add(stored);
    }
    // Snapshot entries all carry the snapshot's index: it is acknowledged once, after SYNCED.
    if (!this.#synced) return -1;
    this.target.retain(append[1], data.subarray(start, end));
    return append[1];
  }

  /** Acknowledges `seq` once everything received up to it is stored (commits finish in order). */
  #acknowledge(seq: number, commits: ChunkCommits, write: (op: unknown[]) => void, fail: (message: string) => void): void {
    if (seq <= this.#received) return;
    this.#received = seq;
    const generation = this.#generation;
    const send = () => {
      // A commit of an earlier link that ends late acknowledges nothing on this one.
      if (generation !== this.#generation || seq <= this.#acked) return;
      this.#acked = seq;
      this.target.stored(seq);
      write([OP.REPL_ACK, seq]);
    };
    if (commits.promises.length === 0 && this.#pendingCommits === 0) return send();
    this.#pendingCommits++;
    this.#commits = Promise.all([this.#commits, ...commits.promises]).then(
      () => {
        this.#pendingCommits--;
        send();
      },
      (error) => {
        this.#pendingCommits--;
        fail(`cannot store a replicated message: ${(error as Error).message}`);
      },
    );
  }
}

/**
 * The commits one chunk of the stream waits on, each once: the entries of one commit share its
 * promise. `settled` is told, once per commit, how many of the chunk's entries it held.
 */
class ChunkCommits {
  readonly promises: Promise<unknown>[] = [];
  /** The entries of the newest commit so far (read once it settles, when the chunk is done). */
  #newest = { entries: 0 };

  constructor(readonly settled: (entries: number) => void) {}

  add(stored: Promise<unknown>): void {
    if (this.promises.at(-1) === stored) {
      this.#newest.entries++;
      return;
    }
    this.promises.push(stored);
    const counted = (this.#newest = { entries: 1 });
    const done = () => this.settled(counted.entries);
    stored.then(done, done);
  }
}
