/**
 * Moving queues between groups (`cluster.etcd`): an operator asks for a move, follows it, and asks
 * for a rebalance. The broker records a move in etcd (server/move/moves.ts); the source group's
 * master runs it, whichever broker was asked.
 *
 *   POST /queues/:endpoint/:version/move   {"to": "<group>"} → 202 the move record (state "copying");
 *                                          also /queues/endpoint%2Fversion/move
 *   GET  /moves                            {moves: [record, …]}: every queue's move in progress or last one, newest first
 *   GET  /moves/:endpoint/:version         one queue's record, or 404
 *   POST /rebalance                        {"dryRun"?: false, "max"?: 10} → the plan (dry run: 200), or
 *                                          the moves asked for, each with its record or its refusal (202)
 *
 * Refusals: BAD_REQUEST (400: body, queue name), MOVE_REFUSED (409: no such group, not placed, a
 * move in progress, no etcd…), STORE_UNAVAILABLE (503: etcd did not answer).
 */
import { type Context, Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import * as v from "valibot";
import { queueProblem } from "../protocol/channel.ts";
import { KittenError } from "../protocol/errors.ts";
import { type BrokerServer, DEFAULT_MAX_MOVES, planRebalance, type PlannedMove } from "../server/mod.ts";

/** A move record, as the broker keeps it (server/cluster/move_records.ts). */
export type MoveRecord = ReturnType<BrokerServer["broker"]["moves"]["status"]>[number];

/** A requested move of a rebalance: the plan's line, then the record or why it was refused. */
export type RebalanceResult = PlannedMove & { record?: MoveRecord; error?: { code: string; message: string } };

/** The bodies are a few fields: anything larger is a mistake. */
const MAX_BODY = 4096;
/** At most this many moves per rebalance. */
export const MAX_REBALANCE_MOVES = 1000;

const groupName = v.pipe(
  v.string("must be a string: a group name"),
  v.regex(/^[A-Za-z0-9._-]{1,64}$/, `must be 1 to 64 of letters, digits, ".", "_", "-"`),
);
const MoveRequest = v.strictObject({ to: groupName });
const RebalanceRequest = v.strictObject({
  dryRun: v.optional(v.boolean("must be true or false"), false),
  max: v.optional(
    v.pipe(v.number("must be an integer"), v.integer("must be an integer"), v.minValue(1, "must be >= 1"), v.maxValue(MAX_REBALANCE_MOVES, `must be <= ${MAX_REBALANCE_MOVES}`)),
    DEFAULT_MAX_MOVES,
  ),
});

export function moveRoutes(server: BrokerServer): Hono {
  const app = new Hono();
  const { broker } = server;
  const limit = (action: string) =>
    bodyLimit({
      maxSize: MAX_BODY,
      onError: () => {
        throw new KittenError("BAD_REQUEST", `Cannot ${action}: the request is larger than ${MAX_BODY} bytes`);
      },
    });

  app.post("/queues/:endpoint/:version/move", limit("move a queue"), async (c) => {
    const queue = queueParam(c, "move");
    const { to } = await body(c, MoveRequest, `Cannot move queue "${queue}"`, '{"to": "<group>"}');
    const record = await broker.moves.request(queue, to);
    broker.log.info("admin", `queue=${queue};move ${record.id} from group "${record.from}" to "${to}" asked by an operator`);
    return c.json(record, 202);
  });
  app.post("/queues/:name/move", (c) => {
    throw new KittenError("BAD_REQUEST", `Cannot move queue "${c.req.param("name")}": ${namingHint("queues", "move")}`);
  });

  app.get("/moves", (c) => c.json({ moves: broker.moves.status() }));
  app.get("/moves/:endpoint/:version", (c) => {
    const queue = queueParam(c, "find the move of");
    const record = broker.moves.status().find((move) => move.queue === queue);
    if (!record) throw new KittenError("NOT_FOUND", `Cannot find a move of queue "${queue}": none is recorded`);
    return c.json(record);
  });
  app.get("/moves/:name", (c) => {
    throw new KittenError("BAD_REQUEST", `Cannot find the move of queue "${c.req.param("name")}": ${namingHint("moves")}`);
  });

  app.post("/rebalance", limit("rebalance"), async (c) => {
    const { dryRun, max } = await body(c, RebalanceRequest, "Cannot rebalance", '{"dryRun": true, "max": 10}');
    const map = broker.placement.map;
    const status = broker.placement.status();
    if (!map || !status) {
      throw new KittenError("MOVE_REFUSED", "Cannot rebalance: this broker spreads no queues over groups (no cluster.etcd), or has not read the map yet");
    }
    // Only groups that can run or take a move: live brokers and a master.
    const groups: Record<string, string[]> = {};
    for (const [group, { brokers, queues }] of Object.entries(status.groups)) {
      if (brokers.length > 0 && map.leader(group) !== null) groups[group] = queues;
    }
    const busy = broker.moves.status().filter((move) => move.state === "copying").map((move) => move.queue);
    const plan = planRebalance(groups, Object.fromEntries(map.loads()), { max, busy });
    if (dryRun) return c.json({ dryRun, ...plan });
    // Moves of different queues are independent: each is asked for now, and runs on its own.
    const moves: RebalanceResult[] = [];
    for (const move of plan.moves) {
      try {
        moves.push({ ...move, record: await broker.moves.request(move.queue, move.to) });
      } catch (error) {
        if (!(error instanceof KittenError)) throw error;
        moves.push({ ...move, error: { code: error.code, message: error.message } });
      }
    }
    const asked = moves.filter((move) => move.record).length;
    broker.log.info("admin", `rebalance asked by an operator: ${asked} of ${plan.moves.length} moves asked for`);
    return c.json({ dryRun, moves, before: plan.before, after: plan.after }, 202);
  });
  return app;
}

/** `endpoint/version` from the path; BAD_REQUEST when it is not a queue name. */
function queueParam(c: Context, action: string): string {
  const queue = `${c.req.param("endpoint")}/${c.req.param("version")}`;
  const problem = queueProblem(queue);
  if (problem !== null) throw new KittenError("BAD_REQUEST", `Cannot ${action} queue ${JSON.stringify(queue)}: ${problem}`);
  return queue;
}

function namingHint(prefix: string, suffix?: string): string {
  const tail = suffix === undefined ? "" : `/${suffix}`;
  return `queues are named "endpoint/version" (/${prefix}/endpoint/version${tail} or /${prefix}/endpoint%2Fversion${tail})`;
}

/** The JSON body, checked against `schema`; BAD_REQUEST naming the first problem and the expected shape. */
async function body<S extends v.GenericSchema>(c: Context, schema: S, action: string, shape: string): Promise<v.InferOutput<S>> {
  let input: unknown;
  try {
    input = await c.req.json();
  } catch (error) {
    throw new KittenError("BAD_REQUEST", `${action}: the request body is not JSON: ${(error as Error).message}; send ${shape}`);
  }
  const parsed = v.safeParse(schema, input);
  if (parsed.success) return parsed.output;
  const issue = parsed.issues[0];
  const path = issue.path?.map((p) => String(p.key)).join(".");
  let problem = `${path}: ${issue.message}`;
  if (!path) problem = "the request body must be a JSON object";
  else if (issue.type === "strict_object" && issue.expected === "never") problem = `${path}: unknown key`;
  else if (issue.type === "strict_object" && issue.received === "undefined") problem = `${path} is missing`;
  throw new KittenError("BAD_REQUEST", `${action}: ${problem}; send ${shape}`);
}
