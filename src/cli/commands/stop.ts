/** `kitten-mq stop`: as soft-stop, with the 5 s bound of SIGTERM (see soft_stop.ts). */
import type { CliArgs } from "../args.ts";
import { run as stop } from "./soft_stop.ts";

export function run(args: CliArgs): Promise<number> {
  return stop(args, "/stop");
}
