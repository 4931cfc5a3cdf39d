/**
 * What a slave keeps track of to mirror its master: every message it holds, by id, so that the
 * master's REMOVEs and the acks clients copy here (ACK_MIRROR) find them. Acks and removals for
 * messages this slave does not hold yet (still committing) are kept, bounded, and applied when
 * the message arrives.
 */
import { RecentMap } from "../../protocol/mod.ts";
import type { Message } from "../queue/message.ts";
import type { Queue } from "../queue/queue.ts";

/** How many acks for messages not arrived yet a slave keeps. */
const EARLY = 100_000;
/**
 * How many removals of messages not in memory a slave keeps: being stored, or paged (in the store
 * only, read back as the queue drains; the master's consumers drain in about the same order).
 */
const EARLY_REMOVALS = 1_000_000;

type EarlyAck = [queue: string, group: string, destination: string];

export class Mirror {
  /** Live messages by id; empty on a master. */
  readonly #messages = new Map<string, Message>();
  readonly #earlyAcks = new RecentMap<string, EarlyAck[]>(EARLY);
  readonly #earlyRemovals = new RecentMap<string, true>(EARLY_REMOVALS);

  constructor(readonly queues: Map<string, Queue>) {}

  get size(): number {
    return this.#messages.size;
  }

  get(id: string): Message | undefined {
    return this.#messages.get(id);
  }

  /** A slave starts tracking a message it accepted (its copies are collected from now on). */
  track(message: Message): void {
    message.copies = [];
    this.#messages.set(message.id, message);
  }

  /** A tracked message is settled. */
  forget(message: Message): void {
    if (message.copies) this.#messages.delete(message.id);
  }

  /** A message was accepted here: acks and removals that came before it apply now. */
  accepted(queue: Queue, message: Message): void {
    if (this.#earlyRemovals.size > 0 && this.#earlyRemovals.get(message.id)) {
      this.#earlyRemovals.delete(message.id);
      queue.mirrored.removed(message);
      return;
    }
    if (this.#earlyAcks.size === 0) return;
    const early = this.#earlyAcks.get(message.id);
    if (early === undefined) return;
    this.#earlyAcks.delete(message.id);
    for (const [name, group, destination] of early) if (name === queue.name) queue.mirrored.acked(message, group, destination);
  }

  /** A client acked, on the master, a copy this slave keeps: drop it here too. */
  acked(queueName: string, groupKey: string, destination: string, messageId: string): void {
    const message = this.#messages.get(messageId);
    if (message) {
      if (message.queue === queueName) this.queues.get(queueName)?.mirrored.acked(message, groupKey, destination);
      return;
    }
    const early = this.#earlyAcks.get(messageId);
    if (early) early.push([queueName, groupKey, destination]);
    else this.#earlyAcks.set(messageId, [[queueName, groupKey, destination]]);
  }

  /** The master settled a message: every copy of it here goes. False when it is not in memory. */
  removed(messageId: string): boolean {
    const message = this.#messages.get(messageId);
    if (!message) return false;
    this.queues.get(message.queue)?.mirrored.removed(message);
    return true;
  }

  /** The master settled a message not in memory here yet (being stored, or paged): it goes when it arrives. */
  removeLater(messageId: string): void {
    this.#earlyRemovals.set(messageId, true);
  }

  /** Removals waiting for their message to arrive in memory. */
  get earlyRemovals(): number {
    return this.#earlyRemovals.size;
  }

  /**
   * The master's snapshot is complete: a message held here that arrived before the snapshot was
   * asked for (`before`, an arrival seq) and is not in it is gone on the master (acked, or never
   * accepted there): it goes here too, so the slave holds exactly what the master holds.
   */
  reconcile(generation: number, before: number): number {
    const stale: Message[] = [];
    for (const message of this.#messages.values()) {
      if (message.seq < before && message.syncGeneration !== generation) stale.push(message);
    }
    for (const message of stale) this.queues.get(message.queue)?.mirrored.removed(message);
    return stale.length;
  }

  /**
   * Becoming a slave (demotion, fencing, a lost election): index the messages held, so that
   * removals and mirrored acks find them.
   */
  start(): void {
    for (const queue of this.queues.values()) {
      queue.mirroring = true;
      for (const copy of queue.liveCopies()) {
        const message = copy.message;
        if (!message.copies) this.track(message);
        message.copies!.push(copy);
      }
    }
  }

  /** Becoming master: the master settles its own deliveries by tag. */
  stop(): void {
    for (const message of this.#messages.values()) message.copies = null;
    this.#messages.clear();
    this.#earlyAcks.clear();
    this.#earlyRemovals.clear();
    for (const queue of this.queues.values()) queue.mirroring = false;
  }
}
