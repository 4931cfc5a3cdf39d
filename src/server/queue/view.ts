/**
 * Read-only snapshots of a queue for operators (admin API, CLI): its handlers and the copies of
 * its messages, page by page. Nothing here changes the queue.
 */
import type { Copy, DeliverySink, Message } from "./message.ts";
import type { Queue } from "./queue.ts";

/** The registered handlers, earliest registrant first. */
/** Consumer registrations of a queue, and the client ids listening to it. */
export function handlerCounts(queue: Queue): { consumers: number; listeners: number } {
  let consumers = 0;
  const listeners = new Set<string>();
  for (const handler of queue.handlers()) {
    if (handler.kind === "consume") consumers++;
    else listeners.add(handler.groupKey);
  }
  return { consumers, listeners: listeners.size };
}

export function handlersInfo(queue: Queue): HandlerInfo[] {
  return queue.handlers().map((handler) => ({
    kind: handler.kind,
    group: handler.groupKey,
    sub: handler.sub,
    ids: [...handler.ids],
    prefetch: handler.prefetch,
    inflight: handler.inflight.size,
    sink: handler.sink,
  }));
}

/**
 * Copies not yet settled, `offset` skipped, at most `limit` (order: see Queue.liveCopies());
 * with `destination`, only the copies of that id.
 */
export function messages(queue: Queue, limit: number, offset = 0, destination?: string): CopyInfo[] {
  const page: CopyInfo[] = [];
  let index = 0;
  for (const copy of queue.liveCopies()) {
    if (page.length >= limit) break;
    if (destination !== undefined && copy.destination !== destination) continue;
    if (index++ >= offset) page.push(copyInfo(copy));
  }
  return page;
}

/** Every live copy of the message with this id (empty when none is left in this queue). */
export function message(queue: Queue, messageId: string): CopyInfo[] {
  const copies: CopyInfo[] = [];
  for (const copy of queue.liveCopies()) if (copy.message.id === messageId) copies.push(copyInfo(copy));
  return copies;
}

export interface Depth {
  ready: number;
  inflight: number;
  delayed: number;
  waiting: number;
}

/** Ready, in-flight, delayed and waiting copies per destination id. */
export function depthById(queue: Queue): Map<string, Depth> {
  const depths = new Map<string, Depth>();
  for (const copy of queue.liveCopies()) {
    let depth = depths.get(copy.destination);
    if (!depth) depths.set(copy.destination, depth = { ready: 0, inflight: 0, delayed: 0, waiting: 0 });
    depth[STATE_NAMES[copy.state as 0 | 1 | 2 | 3]]++;
  }
  return depths;
}

/** One registration, as `handlersInfo()` shows it; `sink` is the session it delivers to. */
export interface HandlerInfo {
  kind: "listen" | "consume";
  /** `consume` for consumers; `listen:<clientId>` for listeners (one copy per clientId). */
  group: string;
  sub: number;
  ids: string[];
  prefetch: number;
  inflight: number;
  sink: DeliverySink;
}

/** One live copy of a message, as `messages()` shows it. `body` is the stored bytes (not copied). */
export interface CopyInfo {
  messageId: string;
  destination: string;
  state: "ready" | "inflight" | "delayed" | "waiting";
  created: number;
  deliveries: number;
  /** Ack deadline (in flight) or due time (delayed), ms; null otherwise. */
  due: number | null;
  /** The group the copy belongs to, or null for a message waiting for any recipient. */
  group: string | null;
  body: Uint8Array;
  deadLetter: Message["deadLetter"];
}

const STATE_NAMES = ["ready", "inflight", "delayed", "waiting"] as const;

function copyInfo(copy: Copy): CopyInfo {
  const state = STATE_NAMES[copy.state as 0 | 1 | 2 | 3];
  return {
    messageId: copy.message.id,
    destination: copy.destination,
    state,
    created: copy.message.created,
    deliveries: copy.deliveries,
    due: state === "inflight" || state === "delayed" ? copy.at : null,
    group: copy.group?.key ?? null,
    body: copy.message.body,
    deadLetter: copy.message.deadLetter,
  };
}
