/**
 * Where dead copies go. A copy dies past its requeue limit, on overflow or past its ttl: it is
 * logged and, when its channel names a `deadLetter` queue, published there with its original body
 * and where it came from (`message.deadLetter`, delivered as the 9th element of DELIVER).
 */
import { channelSettings, type Config } from "./config/config.ts";
import type { Logger } from "./log.ts";
import { type Copy, Message } from "./queue/message.ts";
import type { DeadReason, Queue } from "./queue/queue.ts";
import type { DurableMode, Store } from "./store/store.ts";

/** How soon a dead letter the store refused is written again. */
const DEAD_LETTER_RETRY_MS = 500;

/** What dead-lettering needs of the broker. */
export interface DeadLetterHost {
  readonly config: Config;
  readonly log: Logger;
  readonly isMaster: boolean;
  readonly shuttingDown: boolean;
  now(): number;
  queue(name: string): Queue;
  /** The next arrival number (it also makes the dead letter's id unique). */
  nextSeq(): number;
  /** The store a queue's messages go to; null for a memory-only queue. */
  storeFor(queue: Queue): Store | null;
  /** Streams the dead letter to the replicas (master only). */
  replicate(message: Message): void;
  /** Queues a stored dead letter, or leaves it paged in the store when its queue is over budget. */
  publishStored(queue: Queue, message: Message): void;
}

export class DeadLetters {
  constructor(readonly host: DeadLetterHost) {}

  /** A copy of `origin` died for `reason`. */
  dead(origin: Queue, copy: Copy, reason: DeadReason): void {
    const host = this.host;
    const message = copy.message;
    const target = channelSettings(host.config, message.queue).deadLetter;
    host.log.warn(
      "queue",
      `queue=${message.queue};id=${copy.destination};messageId=${message.id};deliveries=${copy.deliveries};` +
        `reason=${reason};deadLetter=${target ?? "none"};message dead`,
    );
    if (target === null) return;
    const queue = host.queue(target);
    if (queue.held >= queue.settings.maxMessagesPerQueue) {
      host.log.error("queue", `queue=${target};messageId=${message.id};dead-letter queue full;message dropped`);
      return;
    }
    const seq = host.nextSeq();
    const dead = new Message(`${message.id}~${seq}`, target, copy.destination, message.body, host.now(), seq);
    dead.deadLetter = {
      reason,
      channel: `${message.queue}/${copy.destination}`,
      messageId: message.id,
      deliveries: copy.deliveries,
    };
    const store = host.storeFor(queue);
    if (host.isMaster) host.replicate(dead);
    if (!store) return queue.publish(dead);
    // The original stays stored until its dead letter is: while that write fails it is retried,
    // and the original is kept (recovered at the next start) rather than lost between two queues.
    origin.hold(message);
    const write = async (): Promise<void> => {
      try {
        await store.append(dead, queue.settings.durability as DurableMode);
      } catch (error) {
        host.log.error("queue", `messageId=${message.id};dead letter not stored, original kept, retrying: ${error}`);
        if (!host.shuttingDown) setTimeout(run, DEAD_LETTER_RETRY_MS);
        return;
      }
      host.publishStored(queue, dead);
      origin.endHold(message);
    };
    // Off the socket callback: a throw here must be logged, not become an unhandled rejection.
    const run = () => {
      write().catch((error) => host.log.failure("queue", `messageId=${message.id};dead letter`, error));
    };
    run();
  }
}
