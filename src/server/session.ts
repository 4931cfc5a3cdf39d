/**
 * One client connection: reads frames, dispatches operations to the broker, and batches what
 * goes back (deliveries, confirmations, errors) into one write per burst.
 *
 * Handlers return nothing or throw a KittenError; the single catch in `#handle` answers it and,
 * for fatal codes, closes the connection. Nothing a client sends can throw past this file.
 */
import {
  checkAck,
  checkAckMirror,
  checkAuth,
  checkFence,
  checkIds,
  checkMap,
  checkNack,
  checkPing,
  checkSubscribe,
  checkUnsubscribe,
  FrameDecoder,
  isFatal,
  KittenError,
  OP,
  opOf,
  peekOp,
  peerMaxFrameSize,
  queueProblem,
  refOf,
  writeDeliver,
} from "../protocol/mod.ts";
import { PROTOCOL_VERSION } from "../version.ts";
import { mapFrame, mapPush, roleFrame, STOPPING_FRAME, welcomeFrame } from "./announcements.ts";
import type { Broker } from "./broker.ts";
import { createChallenge } from "./security/auth.ts";
import { collectAfterRefusal } from "./collector.ts";
import type { ClientGrants, Rules } from "./security/rules.ts";
import { type Copy, groupKeyOf, type Handler } from "./queue/message.ts";
import type { Peer, SessionState } from "./peer.ts";
import { ReplicaStream } from "./replica_stream.ts";
import { SessionSends } from "./session_sends.ts";
import { Registrations } from "./registrations.ts";
import { type Connection, Outbox } from "./outbox.ts";
import { acceptHello, decodeFrame, HANDSHAKE_MAX_FRAME_SIZE, type HandshakeBudget } from "./handshake.ts";

export class Session implements Peer {
  clientId = "";
  /** A broker of `cluster.peers` (hello.peer): it may ask for the replication stream. */
  isPeer = false;
  /** The replication stream this connection may ask for (a peer). */
  readonly #stream: ReplicaStream;
  state: SessionState = "hello";
  /** The nonce of the challenge sent to this connection; a proof must sign exactly it. */
  #nonce = "";
  #grants: ClientGrants | null = null;
  /** The compiled rules `#grants` came from: a reload compiles new rules and grants follow. */
  #grantsOf: Rules | null = null;
  readonly #broker: Broker;
  readonly #connection: Connection;
  readonly #decoder: FrameDecoder;
  readonly #registrations: Registrations;
  readonly #out: Outbox;
  /** Deliveries stopped because the outgoing bytes reached their bound. */
  #starved = false;
  readonly #budget: HandshakeBudget;
  /** This session's share of `#budget.held`: its partial frame, until welcome. */
  #heldBeforeOpen = 0;
  /** The client asked MAP: it is told when owners of queues change. */
  #followsMap = false;
  readonly #sends: SessionSends;

  constructor(broker: Broker, connection: Connection, budget: HandshakeBudget = { held: 0 }) {
    this.#broker = broker;
    this.#connection = connection;
    this.#budget = budget;
    this.#registrations = new Registrations(broker, this);
    this.#sends = new SessionSends(broker, this, {
      confirm: (ref) => this.#confirm(ref),
      fail: (ref, error) => this.#fail(ref, error),
      afterwards: (step) => this.#afterwards(step),
    });
    const session = this;
    this.#out = new Outbox(connection, {
      get config() {
        return broker.config;
      },
      get isPeer() {
        return session.isPeer;
      },
      slowConsumer: (unsentBytes) => this.#slowConsumer(unsentBytes),
    });
    this.#stream = new ReplicaStream(broker, {
      get clientId() {
        return session.clientId;
      },
      get isPeer() {
        return session.isPeer;
      },
      get isClosed() {
        return session.isClosed;
      },
      dirty: () => broker.markDirty(this),
      fail: (code, message) => this.#fail(null, new KittenError(code, message)),
      confirm: (ref) => this.#confirm(ref),
      refuse: (ref, error) => this.#fail(ref, error),
    }, this.#out);
    this.#decoder = new FrameDecoder(Math.min(HANDSHAKE_MAX_FRAME_SIZE, broker.config.socketServer.maxFrameSize));
  }

  get isClosed(): boolean {
    return this.state === "closed";
  }

  /** Feeds bytes from the socket. */
  receive(chunk: Uint8Array): void {
    if (this.state === "closed") return;
    if (this.state !== "open") return this.#receiveBeforeOpen(chunk);
    try {
      this.#decoder.each(chunk, this.#visit);
    } catch (error) {
      this.#fail(null, error); // an oversized length prefix
    }
  }

  /** Handshake frames: small ones only, and what is left partial counts against the shared budget. */
  #receiveBeforeOpen(chunk: Uint8Array): void {
    try {
      this.#decoder.each(chunk, this.#visit);
    } catch (error) {
      const tooLarge = error instanceof KittenError && error.code === "FRAME_TOO_LARGE";
      const { length, maxFrameSize } = tooLarge ? error.details as { length: number; maxFrameSize: number } : { length: 0, maxFrameSize: 0 };
      this.#fail(null, tooLarge
        ? new KittenError("FRAME_TOO_LARGE", `Cannot read a frame before welcome: length ${length} exceeds ${maxFrameSize}, the largest frame accepted before welcome`)
        : error);
      if (tooLarge) collectAfterRefusal();
    }
    if (this.state === "open" || this.state === "closed") return;
    const held = this.#decoder.pendingBytes;
    this.#budget.held += held - this.#heldBeforeOpen;
    this.#heldBeforeOpen = held;
    const limit = this.#broker.config.socketServer.maxUnauthenticatedBytes;
    if (held > 0 && this.#budget.held > limit) {
      this.#fail(null, new KittenError(
        "TOO_MANY_CONNECTIONS",
        `Cannot buffer a handshake frame: connections not yet welcomed hold ${this.#budget.held} bytes, ` +
          `more than socketServer.maxUnauthenticatedBytes ${limit}`,
      ));
      collectAfterRefusal();
    }
  }

  /** Gives back this session's share of the handshake budget (it was welcomed, or it closed). */
  #releaseHandshakeBytes(): void {
    this.#budget.held -= this.#heldBeforeOpen;
    this.#heldBeforeOpen = 0;
  }

  /** Handles the frame `data[start, end)`; false once the session is closed. */
  readonly #visit = (data: Uint8Array, start: number, end: number): boolean => {
    this.#handle(data, start, end);
    return !this.isClosed;
  };

  #handle(data: Uint8Array, start: number, end: number): void {
    if (this.state === "open" && this.#handleHot(data, start, end)) return;
    let value: unknown[] | null = null;
    try {
      value = decodeFrame(data, start, end);
      const op = opOf(value);
      if (this.state !== "open") this.#checkHandshakeStep(op);
      switch (op) {
        case OP.HELLO: return this.#handleHello(value);
        case OP.AUTH: return this.#handleAuth(value);
        case OP.ACK: {
          const [, sub, tags] = checkAck(value);
          return this.#registrations.ack(sub, tags);
        }
        case OP.NACK: {
          const [, sub, tag, delay] = checkNack(value);
          return this.#registrations.nack(sub, tag, delay);
        }
        case OP.LISTEN: return this.#handleSubscribe(value, "listen");
        case OP.CONSUME: return this.#handleSubscribe(value, "consume");
        case OP.ADD_ID: return this.#handleIds(value, true);
        case OP.REMOVE_ID: return this.#handleIds(value, false);
        case OP.UNSUBSCRIBE: return this.#handleUnsubscribe(value);
        case OP.ACK_MIRROR: return this.#handleAckMirror(value);
        case OP.FENCE: return this.#handleFence(value);
        case OP.PING: return this.#push([OP.PONG, checkPing(value)[1]]);
        case OP.MAP: return this.#handleMap(value);
        case OP.SYNC: return this.#stream.sync(value);
        case OP.REPL_ACK: return this.#stream.ack(value);
        case OP.MOVE_BEGIN: case OP.MOVE_APPEND: case OP.MOVE_REMOVE: return this.#stream.move(value);
        default:
          throw new KittenError("UNKNOWN_OP", `Cannot handle operation ${op}: unknown to protocol ${PROTOCOL_VERSION}`);
      }
    } catch (error) {
      this.#fail(Array.isArray(value) ? refOf(value) : null, error);
    }
  }

  #checkHandshakeStep(op: number): void {
    const expected = this.state === "hello" ? OP.HELLO : this.state === "auth" ? OP.AUTH : -1;
    if (op === expected) return;
    const step = this.state === "hello"
      ? "the first frame must be hello"
      : this.state === "auth"
      ? "the client must answer the challenge first"
      : "authentication is in progress";
    throw new KittenError("BAD_PROTOCOL", `Cannot accept operation ${op}: ${step}`);
  }

  #handleHello(value: unknown[]): void {
    if (this.state !== "hello") throw new KittenError("BAD_PROTOCOL", "Cannot accept hello: the session is already open");
    const { client, peer } = acceptHello(this.#broker, value);
    this.isPeer = peer;
    this.clientId = client;
    this.#nonce = createChallenge();
    this.state = "auth";
    this.#push([OP.CHALLENGE, { nonce: this.#nonce, serviceId: this.#broker.config.serviceId }]);
  }

  /** Verifies the proof (async: key files, signature); the session opens when it holds. */
  #handleAuth(value: unknown[]): void {
    if (this.state !== "auth") throw new KittenError("BAD_PROTOCOL", "Cannot accept auth: the session is already open");
    const [, proof] = checkAuth(value);
    this.state = "verifying";
    this.#afterwards(this.#broker.authenticate(this.clientId, this.#nonce, proof, this.isPeer).then(
      () => this.#open(),
      (error) => this.#fail(null, error),
    ));
  }

  /** Ends an asynchronous step a frame began: its answers are written; a throw is logged, never left unhandled. */
  #afterwards(step: Promise<unknown>): void {
    step.finally(() => this.#broker.flush()).catch((error) =>
      this.#broker.log.failure("socket", `client=${this.clientId}`, error)
    );
  }

  #open(): void {
    if (this.state !== "verifying") return; // closed meanwhile
    const config = this.#broker.config;
    this.state = "open";
    this.#releaseHandshakeBytes();
    this.#decoder.maxFrameSize = this.isPeer ? peerMaxFrameSize(config.socketServer.maxFrameSize) : config.socketServer.maxFrameSize;
    this.#push(welcomeFrame(this.#broker));
    this.#broker.log.info("socket", `client=${this.clientId};remote=${this.#connection.remoteAddress};connected`);
  }

  /** This client's grants under the rules in force (recomputed after a reload). */
  get grants(): ClientGrants {
    const rules = this.#broker.rules;
    if (this.#grantsOf !== rules) {
      this.#grants = rules.forClient(this.clientId);
      this.#grantsOf = rules;
    }
    return this.#grants!;
  }

  /**
   * The frames nearly every message crosses are read in place without decoding: SEND, and a queue
   * move's MOVE_APPEND. False for any other frame (or one the hand-written reader does not take).
   */
  #handleHot(data: Uint8Array, start: number, end: number): boolean {
    const op = peekOp(data, start, end);
    if (op === OP.SEND) {
      this.#sends.handle(data, start, end);
      return true;
    }
    return op === OP.MOVE_APPEND && this.#stream.moveAppend(data, start, end);
  }

  #handleSubscribe(value: unknown[], kind: "listen" | "consume"): void {
    const [, ref, sub, endpoint, version, listed, prefetch] = checkSubscribe(value);
    const granted = this.#registrations.subscribe(kind, sub, endpoint, version, listed, prefetch);
    if (typeof granted === "number") return this.#registered(ref, granted);
    this.#afterwards(granted.then((prefetch) => this.#registered(ref, prefetch), (error) => this.#fail(ref, error)));
  }

  /** A registration's OK, with the prefetch granted: a client that asked more learns why it gets less. */
  #registered(ref: number, prefetch: number): void {
    this.#push([OP.OK, [ref], this.#broker.isMaster ? null : "slave", { prefetch }]);
  }

  /** Where queues live (placing those used for the first time): only queues this client may use. */
  #handleMap(value: unknown[]): void {
    const [, ref, queues] = checkMap(value);
    for (const queue of queues) {
      const problem = queueProblem(queue);
      if (problem !== null) throw new KittenError("BAD_CHANNEL", `Cannot answer map: queue "${queue}" ${problem}`);
      const [endpoint, version] = queue.split("/") as [string, string];
      if (!this.#broker.rules.isOpen && !this.grants.canUse(endpoint, version)) {
        throw new KittenError("NOT_ALLOWED", `Cannot answer map: client "${this.clientId}" may neither read nor write queue "${queue}"`);
      }
    }
    this.#followsMap = true;
    this.#afterwards(this.#broker.placement.view(queues).then((view) => this.#push(mapFrame(ref, view)), (error) => this.#fail(ref, error)));
  }

  #handleIds(value: unknown[], add: boolean): void {
    const [, ref, sub, listed] = checkIds(value);
    this.#registrations.changeIds(sub, listed, add);
    this.#confirm(ref);
  }

  #handleUnsubscribe(value: unknown[]): void {
    const [, ref, sub] = checkUnsubscribe(value);
    this.#registrations.unsubscribe(sub);
    this.#confirm(ref);
  }

  /** A slave drops the copies the master's recipients acked (the client copies its acks here). */
  #handleAckMirror(value: unknown[]): void {
    const [, kind, queue, pairs] = checkAckMirror(value);
    const groupKey = groupKeyOf(kind === 1 ? "consume" : "listen", this.clientId);
    for (let i = 0; i < pairs.length; i += 2) this.#broker.mirrorAck(queue, groupKey, pairs[i]!, pairs[i + 1]!);
  }

  #handleFence(value: unknown[]): void {
    const [, { epoch, master }] = checkFence(value);
    this.#broker.fence(epoch, master, this.clientId);
  }

  /** Tells this client the broker's role and epoch (after a promotion, demotion or fencing). */
  announceRole(): void {
    if (this.state === "open") this.#push(roleFrame(this.#broker));
  }

  /** Owners of `queues` changed: told to a client that follows the map, or whose registrations of one end here. */
  announceMap(queues: string[]): void {
    if (this.state !== "open") return;
    const ended = this.#registrations.forgetMoved(queues);
    if (this.#followsMap || ended) this.#push(mapPush(this.#broker, this.grants, queues));
  }

  /**
   * Tells this client the broker is stopping (soft-stop): an ERROR STOPPING that answers no
   * request. Sends are refused with STOPPING from now on, and the client keeps them.
   */
  announceStopping(): void {
    if (this.state === "open") this.#push([...STOPPING_FRAME]);
  }

  /** Fills every handler's free prefetch slots (the broker just became master). */
  pumpAll(): void {
    this.#registrations.pumpAll();
  }

  // ── outgoing ───────────────────────────────────────────────────────────────────────────────

  /** Bytes written to the socket buffer-side but not yet accepted by the kernel. */
  get unsentBytes(): number {
    return this.#out.unsentBytes;
  }

  writable(): boolean {
    // A slave never delivers: its copies wait until it is promoted.
    // Soft-stop lets deliveries in flight finish but starts no new ones.
    if (this.state === "closed" || !this.#broker.isMaster || this.#broker.stopping) return false;
    // The batch being filled counts too: a resumed reader must not get its whole backlog at once.
    if (this.#out.pendingBytes < this.#broker.config.socketServer.maxOutgoingBytes) return true;
    this.#starved = true;
    return false;
  }

  deliver(copy: Copy, handler: Handler): void {
    const message = copy.message;
    writeDeliver(
      this.#out.batch, handler.sub, copy.tag, message.id, copy.destination, copy.deliveries - 1, message.body,
      message.created, message.deadLetter,
    );
    this.#broker.markDirty(this);
    this.#broker.countDelivered(copy);
  }

  #confirm(ref: number): void {
    if (this.state === "closed") return; // a commit that ended after the client left: nobody to tell
    this.#out.confirm(ref);
    this.#broker.markDirty(this);
  }

  #push(op: unknown[]): void {
    if (this.state === "closed") return;
    this.#out.push(op);
    this.#broker.markDirty(this);
  }

  #fail(ref: number | null, error: unknown): void {
    const known = error instanceof KittenError;
    const code = known ? error.code : "INTERNAL";
    const message = known ? error.message : `Cannot handle the request: internal error: ${(error as Error)?.message ?? String(error)}`;
    if (!known) this.#broker.log.error("socket", `client=${this.clientId};${(error as Error)?.stack ?? error}`);
    if (this.state === "closed") return;
    this.#push(known && error.details !== undefined ? [OP.ERROR, ref, code, message, error.details] : [OP.ERROR, ref, code, message]);
    if (isFatal(code)) {
      this.#broker.log.warn("socket", `client=${this.clientId || "?"};remote=${this.#connection.remoteAddress};code=${code};closing`);
      this.flush();
      // Nothing more is read: what the peer still sends (the rest of an oversized frame) would
      // only be copied into chunks to be dropped.
      this.#connection.pause?.();
      this.#connection.end();
      this.tearDown();
    }
  }

  /** Writes pending frames; what the socket does not take waits for `drain`. */
  flush(): void {
    if (!this.#out.write(!this.#broker.isMaster)) return;
    // Deliveries paused on a full batch resume now that it is written (drain() covers a full socket).
    if (this.#starved && this.writable()) {
      this.#starved = false;
      this.pumpAll();
    }
  }

  /** The socket can take more: send what waited, then resume paused deliveries. */
  drain(): void {
    if (!this.#out.drain()) return;
    this.#stream.drained();
    if (this.writable()) {
      this.#starved = false; // resumed here: the flush below need not pump a second time
      this.pumpAll();
      this.#broker.flush();
    }
  }

  /** True while the socket is not read because the client does not read what it gets. */
  get readPaused(): boolean {
    return this.#out.readPaused;
  }

  /**
   * Closes a connection that did not read for `slowConsumerGraceMs`. It is reset, not ended: an
   * orderly close would wait behind the bytes it does not read, holding them in the kernel. No
   * ERROR frame: it would queue behind those same bytes (logged with its code instead).
   */
  #slowConsumer(unsentBytes: number): void {
    if (this.state === "closed") return;
    const { maxOutgoingBytes, slowConsumerGraceMs } = this.#broker.config.socketServer;
    this.#broker.log.warn(
      "socket",
      `client=${this.clientId};remote=${this.#connection.remoteAddress};code=SLOW_CONSUMER;` +
        `${unsentBytes} bytes unsent for more than slowConsumerGraceMs ${slowConsumerGraceMs} ms ` +
        `(maxOutgoingBytes ${maxOutgoingBytes});closing`,
    );
    this.#out.discard();
    if (this.#connection.terminate) this.#connection.terminate();
    else this.#connection.end();
    this.tearDown();
  }

  /** The connection is gone: its registrations leave, its unacked deliveries are requeued at once. */
  tearDown(): void {
    if (this.state === "closed") return;
    const wasOpen = this.state === "open";
    this.state = "closed";
    this.#releaseHandshakeBytes();
    this.#out.stopTimer();
    this.#registrations.clear();
    this.#stream.detach();
    this.#broker.detach(this);
    if (wasOpen) this.#broker.log.info("socket", `client=${this.clientId};disconnected`);
    this.#broker.flush();
  }
}
