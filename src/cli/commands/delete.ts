/**
 * `kitten-mq delete -q QUEUE [-i ID] [--yes]`: purges a queue (or one destination id): its
 * ready, delayed and waiting messages are removed; in-flight deliveries stay, their consumers
 * are working on them. Asks first on a terminal; without one, `--yes` is required, so a script
 * never purges by accident.
 */
import { createInterface } from "node:readline/promises";
import type { CliArgs } from "../args.ts";
import { CliError, findAdmin, queuePath } from "../api.ts";
import { json } from "../format.ts";

export async function run(args: CliArgs): Promise<number> {
  if (args.queue === undefined) throw new CliError("USAGE", "delete needs -q QUEUE (endpoint/version)");
  const path = queuePath(args.queue);
  const what = `queue "${args.queue}"${args.id === undefined ? "" : ` id "${args.id}"`}`;
  const admin = await findAdmin(args.config);
  await admin.request("GET", path); // an unknown queue is reported before the question is asked
  if (!args.yes) {
    if (!process.stdin.isTTY) throw new CliError("NOT_ALLOWED", `refusing to purge ${what} without --yes: stdin is not a terminal`);
    if (!await confirm(`Purge ${what}? Ready, delayed and waiting messages are removed (y/N): `)) {
      console.log("kitten-mq: nothing purged");
      return 1;
    }
  }
  const query = args.id === undefined ? "" : `?id=${encodeURIComponent(args.id)}`;
  const result = await admin.request<{ purged: number }>("DELETE", path + query);
  console.log(args.json ? json(result) : `kitten-mq: purged ${result.purged} message(s) from ${what}; in-flight deliveries stay`);
  return 0;
}

async function confirm(question: string): Promise<boolean> {
  const prompt = createInterface({ input: process.stdin, output: process.stdout });
  try {
    return /^(y|yes)$/i.test((await prompt.question(question)).trim());
  } finally {
    prompt.close();
  }
}
