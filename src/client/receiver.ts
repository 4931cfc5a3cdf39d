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
import { RecentAcks } from "./recent_acks.ts";
import type { ConsumeHandler, DeliveryInfo, Done, ListenHandler, Subscription } from "./subscription.ts";

export class Receiver {
  /** Deliveries acked recently: a resend after failover is not handled twice. */
  readonly #acked = new RecentAcks();
  /** The link (and its generation) the last delivery came through. */
  #from: HostConnection | null = null;
  #fromGeneration = -1;
  /** The queue name of the subscription the last delivery was for: made once, not per delivery. */
  #queueOf: Subscription | null = null;
  #queue = "";

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
    const remember = this.connections().length > 1;
    if (remember) {
      // A delivery through another link (a new master, a reconnect) may repeat an acked one.
      if (connection !== this.#from || generation !== this.#fromGeneration) {
        this.#from = connection;
        this.#fromGeneration = generation;
        this.#acked.watch();
      }
      if (this.#acked.has(kindOf(subscription), this.#queueName(subscription), destination, messageId)) {
        return this.#ack(connection, sub, tag, subscription, destination, messageId);
      }
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
      if (ok !== false) return this.#ack(connection, sub, tag, remember ? subscription : null, destination, messageId);
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
   * Acks on the delivering broker. With several brokers (`remembered`: the delivery's
   * subscription) the ack is remembered, and copied to the slaves that take no replication stream
   * (they drop their copy; the others get the removal from their master).
   */
  #ack(
    connection: HostConnection,
    sub: number,
    tag: number,
    remembered: Subscription | null,
    destination: string,
    messageId: string,
  ): void {
    connection.ack(sub, tag);
    if (remembered === null) return;
    const kind = kindOf(remembered);
    const queue = this.#queueName(remembered);
    for (const other of this.connections()) {
      if (other !== connection && other.takesCopies) other.mirror(kind, queue, destination, messageId);
    }
    this.#acked.add(kind, queue, destination, messageId);
  }

  #queueName(subscription: Subscription): string {
    if (subscription !== this.#queueOf) {
      this.#queueOf = subscription;
      this.#queue = queueName(subscription.endpoint, subscription.version);
    }
    return this.#queue;
  }

  /** A handler threw: the message is requeued (at least once), then the error reported. */
  #handlerFailed(error: unknown, done: Done): void {
    done(false);
    this.report(error instanceof Error ? error : new Error(String(error)));
  }
}

/** How an ack of a subscription is remembered and mirrored: 1 consumed, 0 listened. */
function kindOf(subscription: Subscription): 0 | 1 {
  return subscription.kind === "consume" ? 1 : 0;
}
