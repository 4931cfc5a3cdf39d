#!/usr/bin/env bun
/**
 * The `kitten-mq` command. The only file that calls `process.exit`.
 */
import { parseArgs } from "node:util";
import { KittenError } from "../protocol/errors.ts";
import { PROTOCOL_VERSION, STORE_VERSION, VERSION } from "../version.ts";
import { run as start } from "./commands/start.ts";

const HELP = `kitten-mq ${VERSION}: easy to learn, secure and fast message broker

Usage:
  kitten-mq start [--config FILE]   run the broker in the foreground (default config when no file)
  kitten-mq --version               print the version, protocol version and store version
  kitten-mq --help                  print this help

Options:
  -c, --config FILE   broker configuration (JSON); relative paths inside are resolved from its folder

Signals (start): SIGTERM/SIGINT stop cleanly, SIGUSR2 reloads the config file.`;

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        config: { type: "string", short: "c" },
        version: { type: "boolean", short: "v" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    console.error(`kitten-mq: ${(error as Error).message}\n\n${HELP}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.version) {
    console.log(`kitten-mq ${VERSION} (protocol ${PROTOCOL_VERSION}, store ${STORE_VERSION})`);
    return 0;
  }
  const command = positionals[0];
  if (values.help || command === undefined || command === "help") {
    console.log(HELP);
    return command === undefined && !values.help ? 2 : 0;
  }
  switch (command) {
    case "start":
      return await start(values.config);
    default:
      console.error(`kitten-mq: unknown command "${command}"\n\n${HELP}`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error) => {
    if (error instanceof KittenError) console.error(`kitten-mq: ${error.code}: ${error.message}`);
    else console.error(`kitten-mq: ${(error as Error)?.stack ?? error}`);
    process.exit(1);
  },
);
