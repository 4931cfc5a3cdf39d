/**
 * A slave's copies of one queue, held for its master: the slave delivers nothing, so its copies
 * change only when the master says what happened to the master's own. A consumer's ack (mirrored
 * by the client, ACK_MIRROR) settles one copy; the master's removal (REMOVE) settles them all; a
 * requeue (REQUEUED: a nack, or an ack deadline passed) counts the delivery and, with a delay,
 * holds them back, so that a promotion goes on as the master would have.
 */
import type { Deliveries } from "./deliveries.ts";
import { takeOutOfPool } from "./groups.ts";
import type { QueueCounters } from "./counters.ts";
import { type Copy, CopyState, type Message } from "./message.ts";
import type { Parking } from "./waiting.ts";

export class MirroredCopies {
  constructor(
    readonly deliveries: Deliveries,
    readonly parking: Parking,
    readonly counters: QueueCounters,
    /** Settles a copy taken out of the queue (the message goes once its last copy does). */
    readonly settle: (copy: Copy) => void,
  ) {}

  /**
   * The master's recipient acked a copy: the one held here for the same group and destination
   * goes, or else a copy of the message still waiting for any recipient. True when one went.
   */
  acked(message: Message, groupKey: string, destination: string): boolean {
    for (const copy of message.copies ?? []) {
      if (copy.destination !== destination || copy.group?.key !== groupKey) continue;
      if (!this.#drop(copy)) continue;
      this.counters.acked++;
      return true;
    }
    const waiting = this.parking.waiting;
    for (const copy of waiting.ordered()) {
      if (copy.message !== message || copy.group !== null) continue;
      waiting.delete(copy);
      this.counters.acked++;
      this.settle(copy);
      return true;
    }
    return false;
  }

  /** The master settled every copy of `message`: every copy held here goes (a slave has none in flight). */
  removed(message: Message): void {
    for (const copy of message.copies ?? []) {
      if (this.#drop(copy)) this.counters.acked++;
    }
  }

  /**
   * The master took `message` back from its consumer after `deliveries` deliveries, due again at
   * `at` (0: at once). Every copy counts them (a promotion's next delivery is one more). With a
   * delay, ready copies wait in the delayed heap; waiting ones are held back when they are
   * routed, and delayed ones when they are due (both read `notBefore`, as after a restart).
   */
  requeued(message: Message, deliveries: number, at: number): void {
    message.requeued(deliveries, at);
    for (const copy of message.copies ?? []) copy.deliveries = Math.max(copy.deliveries, deliveries);
    if (at === 0) return;
    for (const copy of message.copies ?? []) {
      if (copy.state !== CopyState.READY) continue;
      takeOutOfPool(copy);
      this.deliveries.delay(copy, at);
    }
  }

  /** Takes a ready, waiting or delayed copy out and settles it; false for any other state. */
  #drop(copy: Copy): boolean {
    if (copy.state === CopyState.READY) takeOutOfPool(copy);
    else if (copy.state === CopyState.WAITING) this.parking.waiting.delete(copy);
    else if (copy.state !== CopyState.DELAYED) return false; // in flight or settled: nothing to drop
    this.settle(copy);
    return true;
  }
}
