/**
 * The in-memory shapes of the queue engine.
 *
 * A `Message` is what a client sent (stored once, body carried as opaque bytes). A `Copy` is one
 * delivery target of that message: the consumers of an id share one copy, each listening
 * clientId gets its own. Each copy has its own ack state, delivery count and timers, so a
 * listener's automatic ack never settles a consumer's delivery.
 */
import type { Deque } from "../internal/deque.ts";
import type { StoredMessage } from "../store/store.ts";
import type { DeadLetterInfo } from "../../protocol/ops.ts";

export type { DeadLetterInfo } from "../../protocol/ops.ts";

/**
 * What few messages carry: kept out of `Message` so that the common message stays small (JSC keeps
 * an object of 8 fields in 80 bytes, one of 14 in 160). Allocated on the first write.
 */
class Rare {
  deadLetter: DeadLetterInfo | null = null;
  record: StoredMessage | null = null;
  deliveries = 0;
  copies: Copy[] | null = null;
  syncGeneration = 0;
  notBefore = 0;
}

const NONE: Readonly<Rare> = Object.freeze(new Rare());

/** Where a message was sent: shared by every message of the same queue and destination id. */
class Route {
  constructor(readonly queue: string, readonly destination: string) {}
}

/** Destination ids per queue whose routes are kept before the queue's set is started afresh. */
const MAX_ROUTES_PER_QUEUE = 10_000;
const routes = new Map<string, Map<string, Route>>();
let lastRoute = new Route("", "");

/** The shared route of a queue and destination id (one field per message, and one copy of each string). */
function routeOf(queue: string, destination: string): Route {
  if (lastRoute.destination === destination && lastRoute.queue === queue) return lastRoute;
  let byDestination = routes.get(queue);
  if (byDestination === undefined) routes.set(queue, byDestination = new Map());
  let route = byDestination.get(destination);
  if (route === undefined) {
    if (byDestination.size >= MAX_ROUTES_PER_QUEUE) byDestination.clear();
    byDestination.set(destination, route = new Route(queue, destination));
  }
  return (lastRoute = route);
}

export class Message {
  /** Live copies (ready, in flight, delayed or waiting); the message is settled at zero. */
  refs = 0;
  /** Its row in the durable store (written by the store; see StoredMessage.position). */
  position: number | undefined = undefined;
  /** The rare fields below, once one of them was set. */
  #rare: Rare = NONE;
  /** Its queue and destination id: 8 fields in all, which JSC keeps in 80 bytes (9 take 112). */
  readonly #route: Route;
  constructor(
    /** Globally unique id chosen by the sender; used for deduplication. */
    readonly id: string,
    queue: string,
    destination: string,
    /** Encoded by the sender, never decoded here (except for channels with a schema). */
    readonly body: Uint8Array,
    /** Arrival time (ms since epoch): ttl and `info.created` are based on it. */
    readonly created: number,
    /** Arrival order inside the broker: FIFO decisions compare it. */
    readonly seq: number,
  ) {
    this.#route = routeOf(queue, destination);
  }

  /** Queue name `endpoint/version`. */
  get queue(): string {
    return this.#route.queue;
  }

  /** The id the message was sent to (`*` for a broadcast). */
  get destination(): string {
    return this.#route.destination;
  }

  #own(): Rare {
    return this.#rare === NONE ? (this.#rare = new Rare()) : this.#rare;
  }

  /** Set on messages a dead-letter queue received. */
  get deadLetter(): DeadLetterInfo | null {
    return this.#rare.deadLetter;
  }
  set deadLetter(value: DeadLetterInfo | null) {
    if (value !== null || this.#rare !== NONE) this.#own().deadLetter = value;
  }

  /** The store's own object for a message restored from `load()`: `store.remove()` takes that one. */
  get record(): StoredMessage | null {
    return this.#rare.record;
  }
  set record(value: StoredMessage | null) {
    if (value !== null || this.#rare !== NONE) this.#own().record = value;
  }

  /**
   * Deliveries made before it was queued here (a restart, a master that requeued it, a move's
   * source): its copies' redeliveries continue the count.
   */
  get deliveries(): number {
    return this.#rare.deliveries;
  }
  set deliveries(value: number) {
    if (value !== 0 || this.#rare !== NONE) this.#own().deliveries = value;
  }

  /** Its copies, tracked only on a slave, where clients' mirrored acks must find them. */
  get copies(): Copy[] | null {
    return this.#rare.copies;
  }
  set copies(value: Copy[] | null) {
    if (value !== null || this.#rare !== NONE) this.#own().copies = value;
  }

  /**
   * A message nacked with a delay before it was queued here (a restart, a master, a move's
   * source): its copies here are not delivered before this time (ms; 0: no delay).
   */
  get notBefore(): number {
    return this.#rare.notBefore;
  }
  set notBefore(value: number) {
    if (value !== 0 || this.#rare !== NONE) this.#own().notBefore = value;
  }

  /**
   * Taken back from a consumer elsewhere (a master, before a restart) after `deliveries`
   * deliveries, due again at `at` (0: at once): its copies go on from there. The highest count
   * and the latest delay win.
   */
  requeued(deliveries: number, at: number): void {
    if (deliveries > this.deliveries) this.deliveries = deliveries;
    if (at > 0) this.notBefore = at;
  }

  /** On a slave: the master snapshot that last listed it (see Mirror.reconcile()). */
  get syncGeneration(): number {
    return this.#rare.syncGeneration;
  }
  set syncGeneration(value: number) {
    if (value !== 0 || this.#rare !== NONE) this.#own().syncGeneration = value;
  }
}

export const CopyState = {
  READY: 0,
  INFLIGHT: 1,
  DELAYED: 2,
  WAITING: 3,
  SETTLED: 4,
} as const;
export type CopyState = (typeof CopyState)[keyof typeof CopyState];

/** `Copy.#bits`: the state in the low bits, the `recovered` flag above them. */
const STATE_BITS = 7;
const RECOVERED_BIT = 8;

export class Copy {
  /** State and `recovered` in one field: a Copy of 8 fields takes JSC's 80-byte size class, 9 take 112. */
  #bits: number = CopyState.READY;
  /** How many times this copy was handed to a handler (initial delivery included). */
  deliveries = 0;
  /** Handler holding it while in flight. */
  handler: Handler | null = null;
  /** Delivery tag of the current delivery (unique in the process); acks name it. */
  tag = 0;
  /** Ack deadline (in flight) or due time (delayed), ms. */
  at = 0;

  get state(): CopyState {
    return (this.#bits & STATE_BITS) as CopyState;
  }
  set state(value: CopyState) {
    this.#bits = (this.#bits & ~STATE_BITS) | value;
  }

  /** Loaded from the store at start: kept outside the waiting bound until it leaves the list. */
  get recovered(): boolean {
    return (this.#bits & RECOVERED_BIT) !== 0;
  }
  set recovered(value: boolean) {
    this.#bits = value ? this.#bits | RECOVERED_BIT : this.#bits & ~RECOVERED_BIT;
  }

  constructor(
    readonly message: Message,
    /** Destination id of this copy (differs from `message.destination` for broadcasts). */
    readonly destination: string,
    /** The group it belongs to, or null for a message waiting for any recipient at all. */
    public group: Group | null,
  ) {}
}

/** Where deliveries go: implemented by the broker's session (one per connection). */
export interface DeliverySink {
  /** False while the connection's outgoing buffer is above its bound (slow reader). */
  writable(): boolean;
  deliver(copy: Copy, handler: Handler): void;
}

export type HandlerKind = "listen" | "consume";

/**
 * The group a registration belongs to: all the consumers of a queue share one, each listening
 * client has its own. Acks mirrored to a slave name it, so both sides must build it here.
 */
export function groupKeyOf(kind: HandlerKind, clientId: string): string {
  return kind === "consume" ? "consume" : `listen:${clientId}`;
}

/** One `listen()` or `consume()` registration of one connection. */
export class Handler {
  /** In-flight deliveries by tag. Its size is compared with `prefetch`. */
  readonly inflight = new Map<number, Copy>();
  constructor(
    /** Registration order across the broker: round-robin starts with the earliest. */
    readonly seq: number,
    /** The subscription id the client chose; echoed in deliveries. */
    readonly sub: number,
    readonly kind: HandlerKind,
    /** Listeners group by clientId; all consumers of a queue form one group. */
    readonly groupKey: string,
    readonly ids: Set<string>,
    public prefetch: number,
    readonly sink: DeliverySink,
  ) {}

  canTake(): boolean {
    return this.inflight.size < this.prefetch && this.sink.writable();
  }
}

/** A FIFO of ready copies for one destination id inside one group. */
export class Pool {
  readonly ready: Deque<Copy>;
  constructor(readonly group: Group, readonly destination: string, ready: Deque<Copy>) {
    this.ready = ready;
  }
}

/** Handlers that compete for the same copies: one listening clientId, or all consumers. */
export class Group {
  /** Handlers by the id they registered (`*` included), each list in registration order. */
  readonly handlers = new Map<string, Handler[]>();
  readonly pools = new Map<string, Pool>();
  /** Pools with ready copies, so a handler on `*` does not scan every id. */
  readonly readyPools = new Set<Pool>();
  /**
   * `seq` of the handler served last: round-robin continues after it. Per group, not per pool:
   * with one cursor per id, handlers on `*` receiving messages for many ids would all go to the
   * earliest registrant until its prefetch was full.
   */
  cursor = -1;
  constructor(readonly key: string, readonly kind: HandlerKind) {}

  covers(destination: string): boolean {
    return this.handlers.has(destination) || this.handlers.has("*");
  }
}
