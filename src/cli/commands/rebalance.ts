/**
 * `kitten-mq rebalance [--dry-run] [--max N] [--json]`: evens out the groups' weights (each queue
 * 1, plus its rate per 1,000 msg/s) by moving queues from the heaviest group to the lightest
 * (POST /rebalance). `--dry-run` prints the plan only; otherwise every move of the plan is asked
 * for at once (moves of different queues are independent) and each one's record or refusal is
 * printed: exit 1 when any was refused. `kitten-mq move --status` follows them.
 */
import type { CliArgs } from "../args.ts";
import { CliError, findAdmin } from "../api.ts";
import { json, table } from "../format.ts";
import type { MoveRecord } from "../../server/mod.ts";

/** As POST /rebalance bounds it. */
const MAX_MOVES = 1000;

interface Planned {
  queue: string;
  from: string;
  to: string;
  reason: string;
  record?: MoveRecord;
  error?: { code: string; message: string };
}

interface Rebalance {
  dryRun: boolean;
  moves: Planned[];
  before: Record<string, number>;
  after: Record<string, number>;
}

export async function run(args: CliArgs): Promise<number> {
  if (args.positionals.length > 0) throw new CliError("USAGE", `rebalance takes no argument: got ${JSON.stringify(args.positionals[0])}`);
  let max: number | undefined;
  if (args.max !== undefined) {
    max = /^\d{1,9}$/.test(args.max) ? Number(args.max) : NaN;
    if (!(max >= 1 && max <= MAX_MOVES)) {
      throw new CliError("USAGE", `--max must be an integer from 1 to ${MAX_MOVES}: current value is ${JSON.stringify(args.max)}`);
    }
  }
  const admin = await findAdmin(args.config);
  const result = await admin.request<Rebalance>("POST", "/rebalance", { dryRun: args.dryRun, ...(max === undefined ? {} : { max }) });
  const refused = result.moves.filter((move) => move.error !== undefined).length;
  if (args.json) {
    console.log(json(result));
    return refused > 0 ? 1 : 0;
  }
  if (result.moves.length === 0) {
    console.log(`balanced: no move would even out the groups (weights ${weights(result.before)})`);
    return 0;
  }
  const n = result.moves.length;
  const moves = `${n} ${n === 1 ? "move" : "moves"}`;
  if (result.dryRun) {
    console.log(`dry run: ${moves} would even out the groups (weights ${change(result.before, result.after)})`);
    console.log(table(["queue", "move", "reason"], result.moves.map((m) => [m.queue, `${m.from} → ${m.to}`, m.reason])));
    return 0;
  }
  console.log(`${n - refused} of ${moves} asked for (weights ${change(result.before, result.after)} once done); follow them with kitten-mq move --status`);
  console.log(table(["queue", "move", "result"], result.moves.map((m) => [
    m.queue,
    `${m.from} → ${m.to}`,
    m.record ? `${m.record.state} (move ${m.record.id})` : `${m.error!.code}: ${m.error!.message}`,
  ])));
  return refused > 0 ? 1 : 0;
}

/** `g1 3, g2 3`. */
function weights(of: Record<string, number>): string {
  return Object.entries(of).map(([group, weight]) => `${group} ${weight}`).join(", ");
}

/** `g1 5 → 3, g2 1 → 3`. */
function change(before: Record<string, number>, after: Record<string, number>): string {
  return Object.entries(before).map(([group, weight]) => `${group} ${weight} → ${after[group]}`).join(", ");
}
