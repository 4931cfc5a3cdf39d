/**
 * Access rules: who may read (listen, consume, addId) and write (send) which channels.
 *
 * - No rules: every client may read and write everything, and every client id is accepted.
 * - With rules: a client gets the union of what every rule whose `client` matches its id grants
 *   (`client` is an exact id, or a prefix ending in `*`); nothing else. A new (unpinned) id is
 *   accepted only if some rule matches it.
 * - Patterns: `e/v/id`, `e/v/*`, `e/*`. A registration on the `*` id (every id) needs `e/v/*` or
 *   `e/*`: a grant on one id never opens all of them. Same for a broadcast send to `e/v/*`.
 * - `!` marks a read grant exclusive: among the clients whose read of an id comes from a `!`
 *   grant, the first to register the id owns it until its registrations are gone (ExclusiveOwners).
 *   A client reading through a plain grant (an auditor with `invoice/*`) neither blocks nor is
 *   blocked: each rule keeps its own meaning. When several of a client's grants match, the most
 *   specific (id, then version, then endpoint) decides; at the same level `!` wins.
 *
 * Read and write are two separate trees, so a read grant never grants writes; one rule's flags
 * never leak into another's; `!e/*` is enforced like `!e/v/*`; an owner's claims are dropped when
 * its registrations are gone, so it can take the id back after reconnecting; a client no rule
 * names gets nothing.
 *
 * compileRules() runs once per config load; checks are then a few Map lookups, no allocation.
 */
import { parsePattern, WILDCARD } from "../../protocol/channel.ts";
import { KittenError } from "../../protocol/errors.ts";
import type { Rule } from "../config/config.ts";

// The claim bookkeeping lives in its own file; rules.ts is the one import for access control.
export { ExclusiveOwners } from "./exclusive.ts";

export type Direction = "read" | "write";
/** What the client tried, for messages: listen/consume/addId read, send writes. */
export type Action = "listen" | "consume" | "addId" | "send";

/** The grants of one client id, to keep on its session (no per-call cache lookup). */
export interface ClientGrants {
  canRead(endpoint: string, version: string, id: string): boolean;
  canWrite(endpoint: string, version: string, id: string): boolean;
  /** The `!` pattern that makes this read exclusive (e.g. `!invoice/v1/*`), or null. */
  exclusivePattern(endpoint: string, version: string, id: string): string | null;
  /** Whether any read or write grant touches queue `endpoint/version` (who may ask where it lives). */
  canUse(endpoint: string, version: string): boolean;
}

export interface Rules {
  /** True when no rules are configured: everything is allowed. */
  readonly isOpen: boolean;
  /** Whether a new (unpinned) client id may connect: open, or some rule's `client` matches it. */
  accepts(clientId: string): boolean;
  canRead(clientId: string, endpoint: string, version: string, id: string): boolean;
  canWrite(clientId: string, endpoint: string, version: string, id: string): boolean;
  exclusivePattern(clientId: string, endpoint: string, version: string, id: string): string | null;
  forClient(clientId: string): ClientGrants;
}

/** A granted level: `exclusive` is the `!` mark. Undefined `all` = not granted at that level. */
interface VersionNode {
  all: boolean | undefined;
  ids: Map<string, boolean>;
}
interface EndpointNode {
  all: boolean | undefined;
  versions: Map<string, VersionNode>;
}
type Tree = Map<string, EndpointNode>;

interface CompiledRule {
  /** Exact id, or the prefix when `prefix` is true. */
  client: string;
  prefix: boolean;
  read: Tree;
  write: Tree;
}

/** Bounds the per-id cache: prefix rules admit unbounded ids; sessions should hold forClient(). */
const MAX_CACHED_CLIENTS = 10_000;

const OPEN: ClientGrants = {
  canRead: () => true,
  canWrite: () => true,
  exclusivePattern: () => null,
  canUse: () => true,
};

export function compileRules(rules: readonly Rule[]): Rules {
  const compiled = rules.map((rule, index) => compileRule(rule, index));
  return new CompiledRules(compiled);
}

class CompiledRules implements Rules {
  readonly isOpen: boolean;
  readonly #rules: CompiledRule[];
  readonly #cache = new Map<string, ClientGrants>();

  constructor(rules: CompiledRule[]) {
    this.#rules = rules;
    this.isOpen = rules.length === 0;
  }

  accepts(clientId: string): boolean {
    return this.isOpen || this.#rules.some((rule) => ruleMatches(rule, clientId));
  }

  canRead(clientId: string, endpoint: string, version: string, id: string): boolean {
    return this.forClient(clientId).canRead(endpoint, version, id);
  }

  canWrite(clientId: string, endpoint: string, version: string, id: string): boolean {
    return this.forClient(clientId).canWrite(endpoint, version, id);
  }

  exclusivePattern(clientId: string, endpoint: string, version: string, id: string): string | null {
    return this.forClient(clientId).exclusivePattern(endpoint, version, id);
  }

  forClient(clientId: string): ClientGrants {
    if (this.isOpen) return OPEN;
    let grants = this.#cache.get(clientId);
    if (grants === undefined) {
      const matching = this.#rules.filter((rule) => ruleMatches(rule, clientId));
      const read: Tree = new Map();
      const write: Tree = new Map();
      for (const rule of matching) {
        mergeTree(read, rule.read);
        mergeTree(write, rule.write);
      }
      grants = {
        canRead: (endpoint, version, id) => granted(read, endpoint, version, id),
        canWrite: (endpoint, version, id) => granted(write, endpoint, version, id),
        exclusivePattern: (endpoint, version, id) => exclusivePattern(read, endpoint, version, id),
        canUse: (endpoint, version) => touches(read, endpoint, version) || touches(write, endpoint, version),
      };
      if (this.#cache.size >= MAX_CACHED_CLIENTS) this.#cache.clear();
      this.#cache.set(clientId, grants);
    }
    return grants;
  }
}

function ruleMatches(rule: CompiledRule, clientId: string): boolean {
  return rule.prefix ? clientId.startsWith(rule.client) : clientId === rule.client;
}

/** Whether `tree` grants `e/v/id`; `*` as id needs a `e/v/*` or `e/*` grant. */
function granted(tree: Tree, endpoint: string, version: string, id: string): boolean {
  const node = tree.get(endpoint);
  if (node === undefined) return false;
  if (node.all !== undefined) return true;
  const versionNode = node.versions.get(version);
  if (versionNode === undefined) return false;
  if (versionNode.all !== undefined) return true;
  return id !== "*" && versionNode.ids.has(id);
}

/** Whether `tree` grants anything of queue `e/v`: all of it, or one id. */
function touches(tree: Tree, endpoint: string, version: string): boolean {
  const node = tree.get(endpoint);
  if (node === undefined) return false;
  if (node.all !== undefined) return true;
  return node.versions.has(version);
}

/** The most specific read grant of `e/v/id`, when it is `!`-marked, as its pattern text. */
function exclusivePattern(tree: Tree, endpoint: string, version: string, id: string): string | null {
  const node = tree.get(endpoint);
  if (node === undefined) return null;
  const versionNode = node.versions.get(version);
  const exact = id === "*" ? undefined : versionNode?.ids.get(id);
  if (exact !== undefined) return exact ? `!${endpoint}/${version}/${id}` : null;
  if (versionNode?.all !== undefined) return versionNode.all ? `!${endpoint}/${version}/*` : null;
  if (node.all !== undefined) return node.all ? `!${endpoint}/*` : null;
  return null;
}

/** Adds `source`'s grants to `target`; a grant present in both is exclusive if either is. */
function mergeTree(target: Tree, source: Tree): void {
  for (const [endpoint, node] of source) {
    let into = target.get(endpoint);
    if (into === undefined) target.set(endpoint, into = { all: undefined, versions: new Map() });
    into.all = or(into.all, node.all);
    for (const [version, versionNode] of node.versions) {
      let versionInto = into.versions.get(version);
      if (versionInto === undefined) into.versions.set(version, versionInto = { all: undefined, ids: new Map() });
      versionInto.all = or(versionInto.all, versionNode.all);
      for (const [id, exclusive] of versionNode.ids) {
        versionInto.ids.set(id, versionInto.ids.get(id) === true || exclusive);
      }
    }
  }
}

function or(a: boolean | undefined, b: boolean | undefined): boolean | undefined {
  return a === undefined ? b : b === undefined ? a : a || b;
}

function compileRule(rule: Rule, index: number): CompiledRule {
  if (typeof rule?.client !== "string" || rule.client === "") {
    throw invalid(`rules[${index}].client`, "must be a non-empty string");
  }
  // Only a trailing `*` is a wildcard: `a*b` is an exact id, not the prefix `a`.
  const prefix = rule.client.endsWith("*");
  return {
    client: prefix ? rule.client.slice(0, -1) : rule.client,
    prefix,
    read: compileTree(rule.read ?? [], `rules[${index}].read`),
    write: compileTree(rule.write ?? [], `rules[${index}].write`),
  };
}

function compileTree(patterns: readonly string[], path: string): Tree {
  const tree: Tree = new Map();
  patterns.forEach((text, index) => {
    const pattern = typeof text === "string" ? parsePattern(text) : "must be a string";
    if (typeof pattern === "string") throw invalid(`${path}[${index}]`, pattern);
    const { exclusive, endpoint, version, id } = pattern;
    let node = tree.get(endpoint);
    if (node === undefined) tree.set(endpoint, node = { all: undefined, versions: new Map() });
    if (version === WILDCARD) {
      node.all = or(node.all, exclusive);
      return;
    }
    let versionNode = node.versions.get(version);
    if (versionNode === undefined) node.versions.set(version, versionNode = { all: undefined, ids: new Map() });
    if (id === WILDCARD) versionNode.all = or(versionNode.all, exclusive);
    else versionNode.ids.set(id, versionNode.ids.get(id) === true || exclusive);
  });
  return tree;
}

function invalid(path: string, message: string): KittenError {
  return new KittenError("CONFIG_INVALID", `Cannot use rules: ${path}: ${message}`, [{ path, message }]);
}

export function directionOf(action: Action): Direction {
  return action === "send" ? "write" : "read";
}

function attempt(action: Action, channel: string): string {
  switch (action) {
    case "listen":
      return `Cannot listen to "${channel}"`;
    case "consume":
      return `Cannot consume "${channel}"`;
    case "addId":
      return `Cannot add "${channel}" to a subscription`;
    case "send":
      return `Cannot send to "${channel}"`;
  }
}

/** `Cannot listen to "invoice/v1/42": client "easilys-1" has no read rule matching it`. */
export function describeRefusal(clientId: string, action: Action, channel: string): string {
  return `${attempt(action, channel)}: client "${clientId}" has no ${directionOf(action)} rule matching it`;
}

/** The NOT_ALLOWED error for a refused read or write; details name client, channel, direction. */
export function notAllowed(clientId: string, action: Action, channel: string): KittenError {
  return new KittenError("NOT_ALLOWED", describeRefusal(clientId, action, channel), {
    client: clientId,
    channel,
    direction: directionOf(action),
  });
}

/**
 * The EXCLUSIVE_TAKEN error. The owner's id is left out on purpose: the wire message goes to
 * the refused client; the broker's log can name the owner (ExclusiveOwners.ownerOf()).
 */
export function exclusiveTaken(clientId: string, action: Action, channel: string, pattern: string): KittenError {
  return new KittenError(
    "EXCLUSIVE_TAKEN",
    `${attempt(action, channel)}: client "${clientId}" reads it through exclusive rule "${pattern}" and another ` +
      `client owns it until its registrations are gone`,
    { client: clientId, channel, direction: "read", pattern },
  );
}
