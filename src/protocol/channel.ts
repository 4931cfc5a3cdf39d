/**
 * Channel names: `endpoint/version/id`. `endpoint/version` names a queue (one JSON format);
 * `id` picks the recipients inside it, and `*` as the id means "every id".
 */
import { KittenError } from "./errors.ts";

export interface Channel {
  endpoint: string;
  version: string;
  id: string;
}

export const WILDCARD = "*";
const ENDPOINT = /^[A-Za-z0-9_-]{1,64}$/;
const VERSION = /^[A-Za-z0-9._-]{1,32}$/;
/** Any URL-encoded string: no `/`, no `*` (unless the whole id is `*`), no spaces or controls. */
const ID = /^[^/*\s\x00-\x1f\x7f]{1,256}$/;

/** Why `endpoint` is not a valid endpoint, or null when it is. */
export function endpointProblem(endpoint: string): string | null {
  if (endpoint === WILDCARD) return `endpoint cannot be "*"`;
  if (!ENDPOINT.test(endpoint)) return `endpoint "${endpoint}" must be 1 to 64 letters, digits, "-" or "_"`;
  return null;
}

/** Why `version` is not a valid version, or null when it is. */
export function versionProblem(version: string): string | null {
  if (version === WILDCARD) return `version cannot be "*"`;
  if (!VERSION.test(version)) return `version "${version}" must be 1 to 32 letters, digits, ".", "-" or "_"`;
  return null;
}

/** Why `id` is not a valid destination id (`*` allowed), or null when it is. */
export function idProblem(id: string): string | null {
  if (id === WILDCARD) return null;
  if (!ID.test(id)) {
    return `id "${id}" must be 1 to 256 characters, with "/", "*" and spaces URL-encoded`;
  }
  return null;
}

/** Why `name` is not a queue name (`endpoint/version`), or null when it is. */
export function queueProblem(name: string): string | null {
  const parts = name.split("/");
  if (parts.length !== 2) return `must be "endpoint/version"`;
  return endpointProblem(parts[0]!) ?? versionProblem(parts[1]!);
}

/**
 * A rule pattern: `e/*` (every version and id of `e`), `e/v/*` (every id of `e/v`) or `e/v/id`,
 * optionally prefixed with `!` (an exclusive read). `version` and `id` are `*` where they are wild.
 */
export interface ChannelPattern {
  exclusive: boolean;
  endpoint: string;
  version: string;
  id: string;
}

const PATTERN_SHAPE = `must match "endpoint/*", "endpoint/version/*" or "endpoint/version/id", optionally prefixed with "!"`;

/** Parses a rule pattern, or says why it is not one (a string). */
export function parsePattern(text: string): ChannelPattern | string {
  const exclusive = text.startsWith("!");
  const parts = text.slice(exclusive ? 1 : 0).split("/");
  if (parts[0] === WILDCARD) return `endpoint cannot be "*": a rule over every endpoint is refused`;
  if (parts.length === 2 && parts[1] === WILDCARD) {
    return endpointProblem(parts[0]!) ?? { exclusive, endpoint: parts[0]!, version: WILDCARD, id: WILDCARD };
  }
  if (parts.length !== 3 || parts[1] === WILDCARD || parts[2] === "") return PATTERN_SHAPE;
  const [endpoint, version, id] = parts as [string, string, string];
  return endpointProblem(endpoint) ?? versionProblem(version) ?? idProblem(id) ?? { exclusive, endpoint, version, id };
}

/**
 * Parses `endpoint/version/id`. Throws `KittenError("BAD_CHANNEL")` whose message starts with
 * `action` (for example `Cannot send to "a/b"`).
 */
export function parseChannel(name: string, action = "Cannot use channel"): Channel {
  const first = name.indexOf("/");
  const second = first < 0 ? -1 : name.indexOf("/", first + 1);
  if (first < 0 || second < 0) {
    throw new KittenError("BAD_CHANNEL", `${action} "${name}": channel must be "endpoint/version/id"`);
  }
  const channel = {
    endpoint: name.slice(0, first),
    version: name.slice(first + 1, second),
    id: name.slice(second + 1),
  };
  const problem = endpointProblem(channel.endpoint) ?? versionProblem(channel.version) ?? idProblem(channel.id);
  if (problem) throw new KittenError("BAD_CHANNEL", `${action} "${name}": ${problem}`);
  return channel;
}

/** Checks the parts of an object channel `{endpoint, version, ids}`; throws BAD_CHANNEL. */
export function checkChannelParts(endpoint: string, version: string, ids: readonly string[], action: string): void {
  const where = `${endpoint}/${version}`;
  const problem = endpointProblem(endpoint) ?? versionProblem(version) ??
    ids.map(idProblem).find((p) => p !== null) ?? null;
  if (problem) throw new KittenError("BAD_CHANNEL", `${action} "${where}": ${problem}`);
}

export function formatChannel(channel: Channel): string {
  return `${channel.endpoint}/${channel.version}/${channel.id}`;
}

/** The queue name (`endpoint/version`) of a channel. */
export function queueName(endpoint: string, version: string): string {
  return `${endpoint}/${version}`;
}

/**
 * Token-wise match of a pattern against a channel name: `e/v/id` matches itself, `e/v/*`
 * matches every id of `e/v`, `e/*` every version and id of `e`.
 */
export function matchChannel(pattern: string, name: string): boolean {
  if (pattern === name) return true;
  if (!pattern.endsWith("/*")) return false;
  const prefix = pattern.slice(0, -1); // keep the trailing "/"
  return name.startsWith(prefix) && name.length > prefix.length;
}
