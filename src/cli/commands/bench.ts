/**
 * `kitten-mq bench [SCENARIO…]`: measures a broker the way nats bench does. With `--host` it
 * measures the brokers named (a cluster group: repeat it, or separate them with commas); without,
 * it starts one of its own from this same program, on port 0 in a temp folder, and measures its
 * CPU too. Every client is a process of its own (this program again, as its hidden bench-worker
 * command), so clients and broker compete for the cores as in real life. Prints a table, or one
 * JSON document with `--json`. Ctrl-C stops everything it started and removes its temp folders.
 */
import { queueProblem } from "../../protocol/channel.ts";
import { KittenError } from "../../protocol/errors.ts";
import { parseHost } from "../../protocol/host.ts";
import {
  type BenchOptions,
  DEFAULTS,
  runBench,
  type ScenarioName,
  SCENARIOS,
  smallestBody,
} from "../../bench/mod.ts";
import type { CliArgs } from "../args.ts";
import { benchTable } from "../bench_table.ts";
import { CliError } from "../errors.ts";
import { json } from "../format.ts";
import { didYouMean } from "../suggest.ts";

/** Codes of what went wrong on this side (said as a sentence); the broker's refusals keep their code. */
const LOCAL_CODES = new Set(["UNREACHABLE", "TIMEOUT", "INTERNAL"]);

export async function run(args: CliArgs): Promise<number> {
  const options = benchOptions(args);
  const controller = new AbortController();
  let signalled: NodeJS.Signals | null = null;
  const onSignal = (signal: NodeJS.Signals) => {
    signalled = signal;
    controller.abort();
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    const progress = args.json ? undefined : (line: string) => console.error(`kitten-mq bench: ${line}`);
    const report = await runBench(options, { env: process.env, signal: controller.signal, progress });
    console.log(args.json ? json(report) : benchTable(report));
    return 0;
  } catch (error) {
    if (signalled) {
      console.error("kitten-mq bench: interrupted; what it started is stopped and its temp folders removed");
      return signalled === "SIGINT" ? 130 : 143;
    }
    if (error instanceof KittenError && LOCAL_CODES.has(error.code)) throw new CliError(error.code, error.message);
    throw error;
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}

/** The command line as BenchOptions; every mistake is a CliError USAGE naming the flag. */
export function benchOptions(args: CliArgs): BenchOptions {
  const hosts = args.host.flatMap((value) => value.split(",")).map((host) => host.trim()).filter(Boolean);
  for (const host of hosts) {
    try {
      parseHost(host);
    } catch {
      throw new CliError("USAGE", `--host ${JSON.stringify(host)} must look like HOST:PORT[@SERVICE_ID#TOKEN], with a port from 1 to 65535`);
    }
  }
  if (args.host.length > 0 && hosts.length === 0) throw new CliError("USAGE", "--host needs a value: HOST:PORT[@SERVICE_ID#TOKEN]");
  const durability = args.durability ?? "memory";
  if (durability !== "memory" && durability !== "fsync") {
    throw new CliError("USAGE", `--durability must be "memory" or "fsync": current value is ${JSON.stringify(durability)}`);
  }
  if (hosts.length > 0 && args.durability !== undefined) {
    throw new CliError("USAGE", "--durability applies to the broker bench starts: with --host, the brokers' own config decides");
  }
  const channel = args.channel ?? DEFAULTS.channel;
  const problem = queueProblem(channel);
  if (problem !== null) throw new CliError("USAGE", `Cannot use --channel ${JSON.stringify(channel)}: ${problem}`);
  const size = whole("size", args.size, DEFAULTS.size, smallestBody(), 1_000_000);
  return {
    scenarios: scenarioNames([...args.positionals, ...(args.scenario?.split(",") ?? [])]),
    hosts: hosts.length > 0 ? hosts : null,
    durability,
    count: args.count === undefined ? null : whole("count", args.count, 0, 10, 100_000_000),
    size,
    window: whole("window", args.window, DEFAULTS.window, 1, 1_000_000),
    prefetch: whole("prefetch", args.prefetch, DEFAULTS.prefetch, 1, 65_535),
    listeners: whole("listeners", args.listeners, DEFAULTS.listeners, 1, 64),
    rate: whole("rate", args.rate, DEFAULTS.rate, 1, 1_000_000),
    channel,
  };
}

/** The scenarios named (every one when none is, or for "all"), each once, in the order given. */
function scenarioNames(words: string[]): ScenarioName[] {
  const names = words.map((word) => word.trim()).filter(Boolean);
  if (names.length === 0 || names.includes("all")) return [...SCENARIOS];
  for (const name of names) {
    if (!(SCENARIOS as readonly string[]).includes(name)) {
      throw new CliError("USAGE", `unknown scenario "${name}" (${SCENARIOS.join(", ")} or all)${didYouMean(name, [...SCENARIOS, "all"])}`);
    }
  }
  return [...new Set(names as ScenarioName[])];
}

/** `--name`'s value as a whole number from `min` to `max`, or `fallback` when it is not given. */
function whole(name: string, value: string | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  const number = Number(value.replaceAll("_", ""));
  if (!Number.isSafeInteger(number) || number < min || number > max) {
    throw new CliError("USAGE", `--${name} must be a whole number from ${min.toLocaleString("en-US")} to ${max.toLocaleString("en-US")}: current value is ${JSON.stringify(value)}`);
  }
  return number;
}
