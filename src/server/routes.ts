/**
 * Where a send goes: the parsed channel name, its queue and its format. Senders reuse a handful
 * of channel names, so each is parsed once and cached; a reload clears the cache (routes hold
 * each queue's compiled format).
 */
import { encode } from "../protocol/cbor.ts";
import { decodeBody } from "../protocol/body.ts";
import { parseChannel, queueName } from "../protocol/channel.ts";
import { KittenError } from "../protocol/errors.ts";
import type { Queue } from "./queue/queue.ts";
import type { CompiledSchema } from "./schema/schema.ts";

/** Channel names cached at most; past it the cache starts again (a sender inventing names cannot grow it). */
const MAX_ROUTES = 10_000;

export interface ChannelRoute {
  endpoint: string;
  version: string;
  destination: string;
  queue: Queue;
  /** The queue's format, when its channel entry has a `map`. */
  schema: CompiledSchema | undefined;
  unplaced?: undefined;
}

/** A channel of a queue not placed on any group yet (queue map): place `unplaced`, then route again. */
export interface UnplacedRoute {
  endpoint: string;
  version: string;
  destination: string;
  unplaced: string;
}

export class Routes {
  readonly #routes = new Map<string, ChannelRoute>();

  constructor(
    readonly queue: (name: string) => Queue,
    readonly schemas: () => Map<string, CompiledSchema>,
    /** True for a queue no group owns yet; throws NOT_OWNER for one another group owns (placement.ts). */
    readonly unplaced: (queue: string) => boolean,
  ) {}

  /**
   * The route of a channel name; throws BAD_CHANNEL for a name that is not `endpoint/version/id`
   * and NOT_OWNER for a queue another group owns. Only routes of queues served here are cached.
   */
  of(name: string): ChannelRoute | UnplacedRoute {
    let route = this.#routes.get(name);
    if (route) return route;
    const channel = parseChannel(name, "Cannot send to");
    const queue = queueName(channel.endpoint, channel.version);
    if (this.unplaced(queue)) return { endpoint: channel.endpoint, version: channel.version, destination: channel.id, unplaced: queue };
    route = {
      endpoint: channel.endpoint,
      version: channel.version,
      destination: channel.id,
      queue: this.queue(queue),
      schema: this.schemas().get(queue),
    };
    if (this.#routes.size >= MAX_ROUTES) this.#routes.clear();
    this.#routes.set(name, route);
    return route;
  }

  /** Drops every cached route: after a reload (formats) or a change of the queue map (owners). */
  clear(): void {
    this.#routes.clear();
  }
}

/**
 * Checks a body against its channel's format: only channels with a `map` pay for a decode.
 * Returns the body consumers receive: unchanged, or re-encoded when converters changed values.
 */
export function conform(schema: CompiledSchema, channel: string, queue: string, body: Uint8Array): Uint8Array {
  let value: unknown;
  try {
    value = decodeBody(body);
  } catch (error) {
    throw new KittenError("BAD_FORMAT", `Cannot send to "${channel}": the body is not CBOR: ${(error as Error).message}`);
  }
  const result = schema.validate(value);
  if (!result.ok) {
    const first = result.issues[0]!;
    throw new KittenError(
      "BAD_FORMAT",
      `Cannot send to "${channel}": the message does not match the format of "${queue}": ` +
        `${result.issues.length} issue(s), first: ${first.field || "(message)"} ${first.error}`,
      result.issues,
    );
  }
  return result.value === value ? body : encode(result.value);
}
