#!/usr/bin/env bun
/**
 * The `kitten-mq` command. The only file that calls `process.exit`.
 *
 * Exit codes: 0 done; 1 the command failed (broker not running, refused, not found, bad
 * config); 2 bad usage. With `--json` anywhere on the line, a failure prints `{code, message}`
 * (and `details` when the broker listed problems) on stdout instead of a line on stderr.
 */
import { KittenError } from "../protocol/errors.ts";
import { PROTOCOL_VERSION, STORE_VERSION, VERSION } from "../version.ts";
import { type CliArgs, parseCli } from "./args.ts";
import { CliError } from "./errors.ts";
import { COMMAND_HELP, commandHelp, HELP } from "./help.ts";
import { didYouMean } from "./suggest.ts";
import { WORKER_COMMAND } from "../bench/mod.ts";
import { run as bench } from "./commands/bench.ts";
import { run as benchWorker } from "./commands/bench_worker.ts";
import { run as deleteQueue } from "./commands/delete.ts";
import { run as groups } from "./commands/groups.ts";
import { run as initConf } from "./commands/init_conf.ts";
import { run as keys } from "./commands/keys.ts";
import { run as list } from "./commands/list.ts";
import { run as move } from "./commands/move.ts";
import { run as peek } from "./commands/peek.ts";
import { run as publish } from "./commands/publish.ts";
import { run as rebalance } from "./commands/rebalance.ts";
import { run as reload } from "./commands/reload.ts";
import { run as softStop } from "./commands/soft_stop.ts";
import { run as start } from "./commands/start.ts";
import { run as status } from "./commands/status.ts";
import { run as stop } from "./commands/stop.ts";

type Command = (args: CliArgs) => Promise<number>;

const COMMANDS: Record<string, Command> = {
  start,
  status,
  groups,
  move,
  rebalance,
  list,
  peek,
  publish,
  delete: deleteQueue,
  reload,
  "soft-stop": (args) => softStop(args),
  stop,
  keys,
  "init-conf": initConf,
  bench,
};

/** Commands not in the help nor in "did you mean": `kitten-mq bench` runs its clients through them. */
const HIDDEN: Record<string, Command> = {
  [WORKER_COMMAND]: benchWorker,
};

async function main(argv: string[]): Promise<number> {
  const args = parseCli(argv);
  if (args.version) {
    console.log(`kitten-mq ${VERSION} (protocol ${PROTOCOL_VERSION}, store ${STORE_VERSION})`);
    return 0;
  }
  if (args.command === "help") {
    const topic = args.positionals[0];
    console.log(topic !== undefined && Object.hasOwn(COMMAND_HELP, topic) ? commandHelp(topic) : HELP);
    return 0;
  }
  if (args.command === undefined) {
    console.log(HELP);
    return args.help ? 0 : 2;
  }
  const command = Object.hasOwn(COMMANDS, args.command) ? COMMANDS[args.command]! : Object.hasOwn(HIDDEN, args.command) ? HIDDEN[args.command]! : null;
  if (!command) {
    throw new CliError(
      "USAGE",
      `unknown command "${args.command}"${didYouMean(args.command, Object.keys(COMMANDS))}`,
    );
  }
  if (args.help && Object.hasOwn(COMMAND_HELP, args.command)) {
    console.log(commandHelp(args.command));
    return 0;
  }
  return await command(args);
}

/** Prints a failure (a line on stderr, or `{code, message}` with --json) and returns the exit code. */
function report(error: unknown, asJson: boolean): number {
  const code = error instanceof CliError || error instanceof KittenError ? error.code : "INTERNAL";
  const message = error instanceof CliError || error instanceof KittenError ? error.message : String((error as Error)?.message ?? error);
  const details = (error as { details?: unknown })?.details;
  const exitCode = code === "USAGE" ? 2 : 1;
  if (asJson) {
    console.log(JSON.stringify({ code, message, ...(Array.isArray(details) ? { details } : {}) }, null, 2));
    return exitCode;
  }
  // Local problems read as sentences; the broker's refusals keep their code (NOT_FOUND: …).
  const coded = error instanceof KittenError || (error instanceof CliError && error.fromApi);
  // A usage mistake is one line, ending with where the right usage is.
  const hint = code === "USAGE" ? ` (see ${helpCommand})` : "";
  if (error instanceof CliError || error instanceof KittenError) console.error(`kitten-mq: ${coded ? `${code}: ` : ""}${message}${hint}`);
  else console.error(`kitten-mq: ${(error as Error)?.stack ?? error}`);
  // Config problems and the like: one per line, each with its key path.
  if (Array.isArray(details)) {
    for (const item of details) {
      const problem = item as { path?: string; message?: string };
      console.error(`  - ${problem.path === undefined ? JSON.stringify(item) : `${problem.path}: ${problem.message}`}`);
    }
  }
  return exitCode;
}

const argv = process.argv.slice(2);
/** Where a usage error points: the command's own help when the command is known. */
const named = argv.find((word) => !word.startsWith("-"));
const helpCommand = named !== undefined && Object.hasOwn(COMMANDS, named) ? `kitten-mq ${named} --help` : "kitten-mq --help";
main(argv).then(
  (code) => process.exit(code),
  (error) => process.exit(report(error, argv.includes("--json"))),
);
