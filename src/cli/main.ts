#!/usr/bin/env bun
/**
 * The `kitten-mq` command. The only file that calls `process.exit`.
 *
 * Exit codes: 0 done; 1 the command failed (broker not running, refused, not found, bad
 * config); 2 bad usage.
 */
import { KittenError } from "../protocol/errors.ts";
import { PROTOCOL_VERSION, STORE_VERSION, VERSION } from "../version.ts";
import { CliError } from "./api.ts";
import { type CliArgs, parseCli } from "./args.ts";
import { run as deleteQueue } from "./commands/delete.ts";
import { run as initConf } from "./commands/init_conf.ts";
import { run as keys } from "./commands/keys.ts";
import { run as list } from "./commands/list.ts";
import { run as reload } from "./commands/reload.ts";
import { run as softStop } from "./commands/soft_stop.ts";
import { run as start } from "./commands/start.ts";
import { run as status } from "./commands/status.ts";
import { run as stop } from "./commands/stop.ts";

const HELP = `kitten-mq ${VERSION}: easy to learn, secure and fast message broker

Usage:
  kitten-mq start [-c FILE]                  run the broker (and its admin API) in the foreground
  kitten-mq status [-c FILE]                 role, uptime, connections, depths, rates
  kitten-mq list [-q QUEUE [-i ID] [-m]]     queues; one queue's ids, consumers, listeners; -m its messages
  kitten-mq delete -q QUEUE [-i ID] [--yes]  purge ready, delayed and waiting messages (asks first)
  kitten-mq reload [-c FILE]                 re-read the config file (a bad file changes nothing)
  kitten-mq soft-stop [-c FILE]              finish in-flight deliveries (up to 30 s), then exit
  kitten-mq stop [-c FILE]                   the same with a 5 s bound (as SIGTERM)
  kitten-mq keys list | keys revoke ID       pinned client keys; revoke un-pins one (key rotation)
  kitten-mq init-conf [PATH] [--force]       write a documented default config (kitten-mq.config.json)
  kitten-mq --version | --help

Options:
  -c, --config FILE   the broker's config (JSON); the other commands find its admin API through it
                      (admin.host, httpServerPort, admin.token, <dataDirectory>/admin.json)
  --json              print JSON (for scripts)
  -q, --queue QUEUE   endpoint/version      -i, --id ID (or --channel ID)   a destination id
  -m, --messages      list the messages     --limit N, --offset N           a page of them (50)
  -y, --yes           do not ask            -f, --force                      overwrite (init-conf)

Signals (start): SIGUSR2 reloads the config file, SIGUSR1 soft-stops, SIGTERM/SIGINT stop.`;

type Command = (args: CliArgs) => Promise<number>;

const COMMANDS: Record<string, Command> = {
  start,
  status,
  list,
  delete: deleteQueue,
  reload,
  "soft-stop": (args) => softStop(args),
  stop,
  keys,
  "init-conf": initConf,
};

async function main(argv: string[]): Promise<number> {
  let args: CliArgs;
  try {
    args = parseCli(argv);
  } catch (error) {
    console.error(`kitten-mq: ${(error as Error).message}\n\n${HELP}`);
    return 2;
  }
  if (args.version) {
    console.log(`kitten-mq ${VERSION} (protocol ${PROTOCOL_VERSION}, store ${STORE_VERSION})`);
    return 0;
  }
  if (args.help || args.command === undefined || args.command === "help") {
    console.log(HELP);
    return args.command === undefined && !args.help ? 2 : 0;
  }
  const command = Object.hasOwn(COMMANDS, args.command) ? COMMANDS[args.command]! : null;
  if (!command) {
    console.error(`kitten-mq: unknown command "${args.command}"\n\n${HELP}`);
    return 2;
  }
  return await command(args);
}

function report(error: unknown): number {
  if (error instanceof CliError) console.error(`kitten-mq: ${error.message}`);
  else if (error instanceof KittenError) console.error(`kitten-mq: ${error.code}: ${error.message}`);
  else console.error(`kitten-mq: ${(error as Error)?.stack ?? error}`);
  // Config problems and the like: one per line, each with its key path.
  const details = (error as { details?: unknown })?.details;
  if (Array.isArray(details)) {
    for (const item of details) {
      const problem = item as { path?: string; message?: string };
      console.error(`  - ${problem.path === undefined ? JSON.stringify(item) : `${problem.path}: ${problem.message}`}`);
    }
  }
  return 1;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error) => process.exit(report(error)),
);
