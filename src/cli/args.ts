/**
 * The command line: `kitten-mq <command> [positionals] [options]`. One table of options for every
 * command (a flag a command does not use is ignored), parsed here rather than by node:util's
 * parseArgs so that every mistake gets one clear line: an unknown flag with the closest known
 * one, a flag with its value missing named with the value it wants. Mistakes are CliError USAGE
 * (exit code 2).
 */
import { CliError } from "./errors.ts";
import { didYouMean } from "./suggest.ts";

export interface CliArgs {
  command: string | undefined;
  /** Positionals after the command (`init-conf PATH`, `keys revoke ID`, `publish CHANNEL JSON`). */
  positionals: string[];
  /** `--config FILE`: the broker's config, to start it or to find its admin API. */
  config: string | undefined;
  /** `--json`: machine-readable output (the admin API's JSON), errors as `{code, message}`. */
  json: boolean;
  /** `--yes`: no confirmation question (required when stdin is not a terminal). */
  yes: boolean;
  /** `--force`: `init-conf` overwrites an existing file; `reload` promotes a slave that is not in sync. */
  force: boolean;
  /** `-q QUEUE`: `endpoint/version`. */
  queue: string | undefined;
  /** `-i ID` (or `--channel ID`, 0.12's name, kept for scripts): a destination id inside the queue. */
  id: string | undefined;
  /** `-m`: `list` shows the messages too. */
  messages: boolean;
  limit: string | undefined;
  offset: string | undefined;
  /** `bench --host HOST:PORT[@SERVICE_ID#TOKEN]`, repeated or comma-separated: the brokers to measure. */
  host: string[];
  /** `bench --channel ENDPOINT/VERSION` (the same flag as the id's: bench has no id). */
  channel: string | undefined;
  /** `bench` settings, as typed (the command checks them). */
  scenario: string | undefined;
  count: string | undefined;
  size: string | undefined;
  window: string | undefined;
  prefetch: string | undefined;
  listeners: string | undefined;
  rate: string | undefined;
  durability: string | undefined;
  /** `move QUEUE --to GROUP`: the group to move the queue to. */
  to: string | undefined;
  /** `move --wait`: follow the move until it is done or rolled back. */
  wait: boolean;
  /** `move --status`: the moves in progress and the last ones. */
  status: boolean;
  /** `rebalance --dry-run`: the plan only. */
  dryRun: boolean;
  /** `rebalance --max N`, as typed (the command checks it). */
  max: string | undefined;
  version: boolean;
  help: boolean;
}

interface OptionSpec {
  short?: string;
  /** The value it takes, as help names it; absent for a boolean flag. */
  value?: string;
  /** Given more than once, every value counts (otherwise the last one does). */
  repeatable?: boolean;
}

export const OPTIONS: Record<string, OptionSpec> = {
  config: { short: "c", value: "FILE" },
  json: {},
  yes: { short: "y" },
  force: { short: "f" },
  queue: { short: "q", value: "QUEUE (endpoint/version)" },
  id: { short: "i", value: "ID" },
  channel: { value: "ID (bench: ENDPOINT/VERSION)" },
  messages: { short: "m" },
  limit: { value: "N" },
  offset: { value: "N" },
  host: { value: "HOST:PORT[@SERVICE_ID#TOKEN]", repeatable: true },
  scenario: { value: "NAME[,NAME…] (work, fanout, latency)" },
  count: { value: "N" },
  size: { value: "BYTES" },
  window: { value: "N" },
  prefetch: { value: "N" },
  listeners: { value: "N" },
  rate: { value: "MSG/S" },
  durability: { value: "memory|fsync" },
  to: { value: "GROUP" },
  wait: {},
  status: {},
  "dry-run": {},
  max: { value: "N" },
  version: { short: "v" },
  help: { short: "h" },
};

const SHORTS = new Map(Object.entries(OPTIONS).flatMap(([name, spec]) => (spec.short ? [[spec.short, name] as const] : [])));
const KNOWN = [...Object.keys(OPTIONS).map((name) => `--${name}`), ...[...SHORTS.keys()].map((short) => `-${short}`)];

/** How a flag is written in messages: `-q (--queue)` or `--limit`. */
function shown(name: string): string {
  const short = OPTIONS[name]!.short;
  return short ? `-${short} (--${name})` : `--${name}`;
}

/** Throws CliError USAGE on an unknown flag, a missing value, or a value given to a boolean flag. */
export function parseCli(argv: string[]): CliArgs {
  const values = new Map<string, string | true>();
  const repeated = new Map<string, string[]>();
  const positionals: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const token = argv[i]!;
    if (token === "--") {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (!token.startsWith("-") || token === "-") {
      positionals.push(token);
      continue;
    }
    const long = token.startsWith("--");
    const [flag, inline] = long && token.includes("=") ? [token.slice(0, token.indexOf("=")), token.slice(token.indexOf("=") + 1)] : [token, undefined];
    const name = long ? flag.slice(2) : SHORTS.get(flag.slice(1));
    if (name === undefined || !Object.hasOwn(OPTIONS, name)) {
      throw new CliError("USAGE", `unknown option "${flag}"${didYouMean(flag, KNOWN)}`);
    }
    const spec = OPTIONS[name]!;
    if (spec.value === undefined) {
      if (inline !== undefined) throw new CliError("USAGE", `${shown(name)} takes no value: current value is ${JSON.stringify(inline)}`);
      values.set(name, true);
      continue;
    }
    const value = inline ?? argv[i + 1];
    // A value that looks like a flag is a forgotten value (`list -q -m`), except a negative number.
    if (value === undefined || value === "" || (inline === undefined && value.startsWith("-") && !/^-\d/.test(value))) {
      throw new CliError("USAGE", `${shown(name)} needs a value: ${spec.value}`);
    }
    if (inline === undefined) i++;
    values.set(name, value);
    if (spec.repeatable) repeated.set(name, [...(repeated.get(name) ?? []), value]);
  }
  const text = (name: string) => values.get(name) as string | undefined;
  const flag = (name: string) => values.get(name) === true;
  return {
    command: positionals[0],
    positionals: positionals.slice(1),
    config: text("config"),
    json: flag("json"),
    yes: flag("yes"),
    force: flag("force"),
    queue: text("queue"),
    id: text("id") ?? text("channel"),
    messages: flag("messages"),
    limit: text("limit"),
    offset: text("offset"),
    host: repeated.get("host") ?? [],
    channel: text("channel"),
    scenario: text("scenario"),
    count: text("count"),
    size: text("size"),
    window: text("window"),
    prefetch: text("prefetch"),
    listeners: text("listeners"),
    rate: text("rate"),
    durability: text("durability"),
    to: text("to"),
    wait: flag("wait"),
    status: flag("status"),
    dryRun: flag("dry-run"),
    max: text("max"),
    version: flag("version"),
    help: flag("help"),
  };
}
