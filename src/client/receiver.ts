/**
 * The receiving side of a client: each delivery is decoded, run through its subscription's
 * handler, then acked or nacked on the broker that delivered it. With several brokers, acks are
 * also copied to the others (slaves drop their copy) and remembered, so that a failover that
 * delivers an acked message again does not run the handler twice.
 */
import {
  decodeBody,
  type DeliverFields,
  KittenError,
  MAX_NACK_DELAY_SECONDS,
  OP,
  queueName,
} from "../protocol/mod.ts";
import type { HostConnection } from "./connection.ts";
import type { MasterTracker } from "./masters.ts";
import type { ConsumeHandler, DeliveryInfo, Done, ListenHandler, Subscription } from "./subscription.ts";

/** How many acked deliveries the client remembers to recognise a duplicate after a failover. */
const ACKED_WINDOW = 20_000;

export class Receiver {
  /** Deliveries acked recently: a resend after failover is not handled twice. */
  readonly #acked = new RecentAcks();
  /** The link (and its generation) the last delivery came through. */
  #from: HostConnection | null = null;
  #fromGeneration = -1;

  constructor(
    /** The client's open subscriptions, by sub. */
    readonly subscriptions: ReadonlyMap<number, Subscription>,
    readonly masters: MasterTracker,
    readonly connections: () => readonly HostConnection[],
    /** Tells the user (the client's "error" event). */
    readonly report: (error: Error) => void,
  ) {}

  receive(connection: HostConnection, delivery: DeliverFields): void {
    const { sub, tag, messageId, destination, nbRequeues, body, created, deadLetter } = delivery;
    const subscription = this.subscriptions.get(sub);
    if (!subscription) return; // closed locally; the broker requeues it when the close lands
    if (!this.masters.isMaster(connection)) return; // an old (fenced) master: its deliveries are refused
    const generation = connection.generation;
    // With several brokers, acks are copied to the slaves and remembered (a failover may deliver
    // an acked message again): acked before means settle it again, once, without the handler. A
    // lone broker needs neither, and saves their cost. Decided here, once: done() may come after
    // disconnect(), when there are no connections left to count.
    const acked = this.connections().length > 1 ? ackedOf(subscription, destination, messageId) : null;
    if (acked !== null) {
      // A delivery through another link (a new master, a reconnect) may repeat an acked one.
      if (connection !== this.#from || generation !== this.#fromGeneration) {
        this.#from = connection;
        this.#fromGeneration = generation;
        this.#acked.watch();
      }
      if (this.#acked.has(acked)) return this.#ack(connection, sub, tag, acked);
    }
    let message: unknown;
    try {
      message = decodeBody(body);
    } catch (error) {
      // NACK first: reporting runs the user's listener, whatever it does the message comes back.
      connection.send([OP.NACK, sub, tag, 0]);
      return this.report(new KittenError("BAD_FORMAT", `Cannot decode message "${messageId}": ${(error as Error).message}`));
    }
    const info: DeliveryInfo = {
      messageId,
      channel: { endpoint: subscription.endpoint, version: subscription.version, id: destination },
      created,
      nbRequeues,
      handlerId: sub,
    };
    if (deadLetter) info.deadLetter = deadLetter;
    let settled = false;
    const done: Done = (ok = true, delaySeconds = 0) => {
      if (settled || connection.generation !== generation) return; // late: the broker requeued it
      settled = true;
      if (ok !== false) return this.#ack(connection, sub, tag, acked);
      connection.send([OP.NACK, sub, tag, Math.min(MAX_NACK_DELAY_SECONDS, Math.max(0, Number(delaySeconds) || 0))]);
    };
    try {
      if (subscription.kind === "consume") {
        (subscription.handler as ConsumeHandler)(null, message, done, info);
        return;
      }
      const result = (subscription.handler as ListenHandler)(null, message, info);
      if (result instanceof Promise) result.then(() => done(), (error) => this.#handlerFailed(error, done));
      else done();
    } catch (error) {
      this.#handlerFailed(error, done);
    }
  }

  /** Copies every remembered ack to a slave that was away (see Client #catchUp). */
  catchUp(connection: HostConnection): void {
    for (const acked of this.#acked.all()) connection.mirror(acked.kind, acked.queue, acked.destination, acked.messageId);
  }

  /**
   * Acks on the delivering broker. With several brokers (`acked` given) the ack is remembered, and
   * copied to the slaves that take no replication stream (they drop their copy; the others get
   * the removal from their master).
   */
  #ack(connection: HostConnection, sub: number, tag: number, acked: AckedDelivery | null): void {
    connection.ack(sub, tag);
    if (acked === null) return;
    for (const other of this.connections()) {
      if (other !== connection && other.takesCopies) other.mirror(acked.kind, acked.queue, acked.destination, acked.messageId);
    }
    this.#acked.add(acked);
  }

  /** A handler threw: the message is requeued (at least once), then the error reported. */
  #handlerFailed(error: unknown, done: Done): void {
    done(false);
    this.report(error instanceof Error ? error : new Error(String(error)));
  }
}

/** One acked delivery target of a message, remembered to recognise it after a failover. */
interface AckedDelivery {
  kind: 0 | 1;
  queue: string;
  destination: string;
  messageId: string;
}

function ackedOf(subscription: Subscription, destination: string, messageId: string): AckedDelivery {
  return {
    kind: subscription.kind === "consume" ? 1 : 0,
    queue: queueName(subscription.endpoint, subscription.version),
    destination,
    messageId,
  };
}

function sameTarget(a: AckedDelivery, b: AckedDelivery): boolean {
  return a.kind === b.kind && a.destination === b.destination && a.queue === b.queue;
}

/**
 * Acked deliveries, the last ACKED_WINDOW of them. A broker never delivers again what was acked
 * on the same link, so only deliveries through another link can repeat an acked one: after a
 * failover or a reconnect. The acks are kept in a ring; they are looked up by message id (a map,
 * made from the ring) only from such a change until ACKED_WINDOW acks later, when every ack
 * remembered was made on the link that delivers now. So a client whose link does not change pays
 * an array write per ack, not four map operations. A message reaches one client under more than
 * one target only when it both listens and consumes, or under a wildcard and an id: such an id
 * keeps a list.
 */
class RecentAcks {
  readonly #ring: (AckedDelivery | undefined)[] = new Array(ACKED_WINDOW);
  #next = 0;
  #byId: Map<string, AckedDelivery | AckedDelivery[]> | null = null;
  /** Acks since the last change of link, while watching. */
  #sinceWatch = 0;

  /** The delivering link changed: acked deliveries are looked up by id from now on. */
  watch(): void {
    this.#sinceWatch = 0;
    if (this.#byId !== null) return;
    const byId = (this.#byId = new Map());
    for (const acked of this.all()) addTo(byId, acked);
  }

  has(acked: AckedDelivery): boolean {
    const held = this.#byId?.get(acked.messageId);
    if (held === undefined) return false;
    return Array.isArray(held) ? held.some((each) => sameTarget(each, acked)) : sameTarget(held, acked);
  }

  add(acked: AckedDelivery): void {
    const at = this.#next;
    const evicted = this.#ring[at];
    this.#ring[at] = acked;
    this.#next = (at + 1) % ACKED_WINDOW;
    const byId = this.#byId;
    if (byId === null) return;
    if (++this.#sinceWatch >= ACKED_WINDOW) {
      this.#byId = null; // every ack remembered was made on the link that delivers now
      return;
    }
    if (evicted !== undefined) removeFrom(byId, evicted);
    addTo(byId, acked);
  }

  /** Every remembered ack, oldest first. */
  *all(): IterableIterator<AckedDelivery> {
    for (let i = 0; i < ACKED_WINDOW; i++) {
      const acked = this.#ring[(this.#next + i) % ACKED_WINDOW];
      if (acked !== undefined) yield acked;
    }
  }
}

function addTo(byId: Map<string, AckedDelivery | AckedDelivery[]>, acked: AckedDelivery): void {
  const held = byId.get(acked.messageId);
  if (held === undefined) return void byId.set(acked.messageId, acked);
  if (!Array.isArray(held)) {
    if (!sameTarget(held, acked)) byId.set(acked.messageId, [held, acked]);
    return;
  }
  if (!held.some((each) => sameTarget(each, acked))) held.push(acked);
}

function removeFrom(byId: Map<string, AckedDelivery | AckedDelivery[]>, acked: AckedDelivery): void {
  const held = byId.get(acked.messageId);
  if (held === undefined) return;
  if (!Array.isArray(held)) {
    if (held === acked) byId.delete(acked.messageId);
    return;
  }
  const left = held.filter((each) => each !== acked);
  if (left.length === 0) byId.delete(acked.messageId);
  else byId.set(acked.messageId, left.length === 1 ? left[0]! : left);
}
