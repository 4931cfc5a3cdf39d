/**
 * `kitten-mq move QUEUE --to GROUP [--wait]`: asks for a move of a queue to another group
 * (POST /queues/:endpoint/:version/move, on any broker of the deployment); the source group's
 * master runs it while the queue serves. With `--wait`, follows it (GET /moves/:endpoint/:version)
 * until it is done (exit 0) or rolled back (exit 1, with the reason).
 *
 * `kitten-mq move --status [QUEUE]`: each queue's move in progress or its last one (GET /moves).
 */
import type { CliArgs } from "../args.ts";
import { type Admin, CliError, findAdmin } from "../api.ts";
import { count, json, table } from "../format.ts";
import { queueProblem } from "../../protocol/channel.ts";
import type { MoveRecord } from "../../server/mod.ts";

/** How often --wait asks how the move is going. */
const POLL_MS = 250;

export async function run(args: CliArgs): Promise<number> {
  if (args.positionals.length > 1) throw new CliError("USAGE", `move takes one queue: got ${args.positionals.map((p) => JSON.stringify(p)).join(" ")}`);
  const queue = args.positionals[0] ?? args.queue;
  if (queue !== undefined) {
    const problem = queueProblem(queue);
    if (problem !== null) throw new CliError("USAGE", `Cannot move ${JSON.stringify(queue)}: ${problem}`);
  }
  if (args.status) {
    if (args.to !== undefined || args.wait) throw new CliError("USAGE", "move --status shows moves: it takes no --to nor --wait");
    return await status(await findAdmin(args.config), queue, args.json);
  }
  if (queue === undefined) throw new CliError("USAGE", "move needs a queue (endpoint/version) and --to GROUP, or --status");
  if (args.to === undefined) throw new CliError("USAGE", `move needs --to GROUP: the group to move "${queue}" to`);
  const admin = await findAdmin(args.config);
  const record = await admin.request<MoveRecord>("POST", `${path("queues", queue)}/move`, { to: args.to });
  if (!args.wait) {
    console.log(args.json ? json(record) : `${summary(record)}\nfollow it with: kitten-mq move --status ${queue}`);
    return 0;
  }
  if (!args.json) console.log(summary(record));
  const last = await follow(admin, record, args.json);
  if (args.json) {
    console.log(json(last));
    return last.state === "done" ? 0 : 1;
  }
  if (last.state === "done") {
    const took = ((last.finishedAt ?? last.updatedAt) - last.requestedAt) / 1000;
    console.log(`done: ${queue} is on group ${last.to} (${count(last.copied)} messages copied, sends held ${last.fenceMs ?? 0} ms, ${took.toFixed(1)} s)`);
    return 0;
  }
  throw new CliError("MOVE_REFUSED", `the move of "${queue}" to group ${last.to} was rolled back, the queue stays on group ${last.from}: ${last.reason ?? "no reason recorded"}`);
}

/** Polls the queue's record until the move `asked` ends; prints each new phase (not with --json). */
async function follow(admin: Admin, asked: MoveRecord, quiet: boolean): Promise<MoveRecord> {
  let shown = `${asked.state}/${asked.phase}`;
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    const record = await admin.request<MoveRecord>("GET", path("moves", asked.queue));
    if (record.id !== asked.id) {
      throw new CliError("NOT_FOUND", `the move of "${asked.queue}" (${asked.id}) is no longer recorded: move ${record.id} (${record.state}) replaced it`);
    }
    if (record.state !== "copying") return record;
    const now = `${record.state}/${record.phase}`;
    if (!quiet && now !== shown) console.log(`  ${record.phase}: ${progress(record)} copied`);
    shown = now;
  }
}

async function status(admin: Admin, queue: string | undefined, asJson: boolean): Promise<number> {
  const moves = queue === undefined
    ? (await admin.request<{ moves: MoveRecord[] }>("GET", "/moves")).moves
    : [await admin.request<MoveRecord>("GET", path("moves", queue))];
  if (asJson) {
    console.log(json(queue === undefined ? { moves } : moves[0]));
    return 0;
  }
  if (moves.length === 0) {
    console.log("no move recorded (kitten-mq move QUEUE --to GROUP asks for one)");
    return 0;
  }
  const now = Date.now();
  console.log(table(
    ["queue", "move", "state", "copied", "fence ms", "age", "reason"],
    moves.map((m) => [
      m.queue,
      `${m.from} → ${m.to}`,
      m.state === "copying" ? `copying/${m.phase}` : m.state,
      progress(m),
      m.fenceMs ?? null,
      age(now - m.requestedAt),
      m.reason ?? null,
    ]),
  ));
  return 0;
}

function summary(record: MoveRecord): string {
  return `move ${record.id}: ${record.queue} from group ${record.from} to ${record.to}: ${record.state} (${record.phase})`;
}

/** `1,234/2,000`: messages streamed, and the snapshot's size (live messages go on top of it). */
function progress(record: MoveRecord): string {
  return `${count(record.copied)}/${count(record.snapshot)}`;
}

/** `/queues/orders/v1`, `/moves/orders/v1`. */
function path(prefix: string, queue: string): string {
  return `/${prefix}/${queue.split("/").map(encodeURIComponent).join("/")}`;
}

/** `45s`, `12m`, `3h`, `2d`. */
export function age(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  if (s < 172_800) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86400)}d`;
}
