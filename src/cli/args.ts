/**
 * The command line: `kitten-mq <command> [positionals] [options]`, parsed with node:util's
 * parseArgs. One options object for every command: a flag a command does not use is ignored.
 */
import { parseArgs } from "node:util";

export interface CliArgs {
  command: string | undefined;
  /** Positionals after the command (`init-conf PATH`, `keys revoke ID`). */
  positionals: string[];
  /** `--config FILE`: the broker's config, to start it or to find its admin API. */
  config: string | undefined;
  /** `--json`: machine-readable output (the admin API's JSON). */
  json: boolean;
  /** `--yes`: no confirmation question (required when stdin is not a terminal). */
  yes: boolean;
  /** `--force`: `init-conf` overwrites an existing file; `reload` promotes a slave that is not in sync. */
  force: boolean;
  /** `-q QUEUE`: `endpoint/version`. */
  queue: string | undefined;
  /** `-i ID` (or `--channel ID`, the original's name): a destination id inside the queue. */
  id: string | undefined;
  /** `-m`: `list` shows the messages too. */
  messages: boolean;
  limit: string | undefined;
  offset: string | undefined;
  version: boolean;
  help: boolean;
}

/** Throws a TypeError with parseArgs' message on unknown options or missing values. */
export function parseCli(argv: string[]): CliArgs {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      config: { type: "string", short: "c" },
      json: { type: "boolean" },
      yes: { type: "boolean", short: "y" },
      force: { type: "boolean", short: "f" },
      queue: { type: "string", short: "q" },
      id: { type: "string", short: "i" },
      channel: { type: "string" },
      messages: { type: "boolean", short: "m" },
      limit: { type: "string" },
      offset: { type: "string" },
      version: { type: "boolean", short: "v" },
      help: { type: "boolean", short: "h" },
    },
  });
  return {
    command: positionals[0],
    positionals: positionals.slice(1),
    config: values.config,
    json: values.json ?? false,
    yes: values.yes ?? false,
    force: values.force ?? false,
    queue: values.queue,
    id: values.id ?? values.channel,
    messages: values.messages ?? false,
    limit: values.limit,
    offset: values.offset,
    version: values.version ?? false,
    help: values.help ?? false,
  };
}
