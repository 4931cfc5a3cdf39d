/**
 * `kitten-mq bench-worker ROLE JSON`: hidden (not in the help). One client process of
 * `kitten-mq bench`, which runs this same program again for each (src/bench/worker/).
 */
import type { CliArgs } from "../args.ts";
import { processIo, workerMain } from "../../bench/mod.ts";

export function run(args: CliArgs): Promise<number> {
  return workerMain(args.positionals, processIo());
}
