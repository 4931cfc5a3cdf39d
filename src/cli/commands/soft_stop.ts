/**
 * `kitten-mq soft-stop` and `kitten-mq stop`: the broker refuses new connections and sends,
 * lets in-flight deliveries finish (soft-stop up to 30 s, stop up to 5 s, as SIGUSR1 and
 * SIGTERM), then exits. The command returns once the broker no longer answers, so a failover
 * script can promote the next master right after it.
 */
import { type CliArgs } from "../args.ts";
import { CliError, findAdmin } from "../api.ts";
import { json } from "../format.ts";

/** Extra wait beyond the broker's grace period: persisting and closing take a moment. */
const MARGIN_MS = 10_000;

export async function run(args: CliArgs, route: "/soft-stop" | "/stop" = "/soft-stop"): Promise<number> {
  const admin = await findAdmin(args.config);
  const reply = await admin.request<{ graceMs: number }>("POST", route);
  if (!args.json) {
    console.log(`kitten-mq: ${route.slice(1)} requested; in-flight deliveries get up to ${reply.graceMs / 1000} s`);
  }
  const gone = await admin.waitGone(reply.graceMs + MARGIN_MS);
  if (!gone) throw new CliError("STOPPING", `the broker on ${admin.url} still answers ${(reply.graceMs + MARGIN_MS) / 1000} s later`);
  console.log(args.json ? json({ ...reply, stopped: true }) : "kitten-mq: broker stopped");
  return 0;
}
