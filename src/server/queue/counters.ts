/**
 * What one queue counts, exposed as statistics (`kitten_mq_queue_*`, stats/): every message and
 * copy the queue took in, handed out, and let go of, by how it went.
 */
export interface QueueCounters {
  received: number;
  delivered: number;
  acked: number;
  nacked: number;
  timeout: number;
  /** Dropped for `maxItemsInQueue` (overflow). */
  dropped: number;
  /** Gone past their `ttl`. */
  expired: number;
  /** Dead past `requeueLimit`. */
  dead: number;
}

export function newQueueCounters(): QueueCounters {
  return { received: 0, delivered: 0, acked: 0, nacked: 0, timeout: 0, dropped: 0, expired: 0, dead: 0 };
}
