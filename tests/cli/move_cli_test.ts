/**
 * `kitten-mq move` and `kitten-mq rebalance`: against brokers started as an operator does (real
 * etcd, groups g1 and g2 with one broker process each, a real move between them); and, for the
 * outcomes a live deployment cannot be made to give on cue (a move rolled back, a rebalance
 * with a refusal), against a stand-in admin API.
 */
import { describe, expect, it } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { waitFor } from "../helpers/broker.ts";
import { testPrefix } from "../helpers/election.ts";
import { etcdSuite } from "../helpers/etcd_suite.ts";
import { type BrokerProcess, cli, startBrokerProcess } from "./_broker.ts";

const suite = etcdSuite();

async function api(process: BrokerProcess, method: string, path: string, body?: unknown): Promise<any> {
  const init = body === undefined ? { method } : { method, headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  return await (await fetch(process.adminUrl + path, init)).json();
}

/** g1 owns a/v1, c/v1 and d/v1, g2 owns b/v1; both masters are known to both brokers. */
async function twoGroups(): Promise<[BrokerProcess, BrokerProcess]> {
  const prefix = testPrefix();
  const channels = { "a/v1": { group: "g1" }, "c/v1": { group: "g1" }, "d/v1": { group: "g1" }, "b/v1": { group: "g2" } };
  const started = await Promise.all(["g1", "g2"].map(async (group) => {
    const process = await startBrokerProcess({ socketServer: { port: 0, host: "127.0.0.1" }, serviceId: `${group}-1`, channels, cluster: suite.groupCluster(group, prefix) });
    suite.defer(() => process.stop());
    return process;
  }));
  // A rebalance plans over the groups whose master this broker knows: both, on both brokers.
  await waitFor(async () => {
    const plans = await Promise.all(started.map((process) => api(process, "POST", "/rebalance", { dryRun: true })));
    return plans.every((plan) => plan.before?.g1 === 3 && plan.before?.g2 === 1);
  }, 15_000, "both brokers see both groups' masters and the four queues placed");
  return started as [BrokerProcess, BrokerProcess];
}

/** A stand-in admin API on a free port, and a config file that points the CLI at it. */
function fakeAdmin(handle: (method: string, path: string, body: unknown) => unknown): string {
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(request) {
      const body = request.method === "GET" ? undefined : await request.json().catch(() => undefined);
      const [status, answer] = handle(request.method, new URL(request.url).pathname, body) as [number, unknown];
      return Response.json(answer, { status });
    },
  });
  const dir = mkdtempSync(join(tmpdir(), "kitten-fake-admin-"));
  const configPath = join(dir, "kitten-mq.config.json");
  writeFileSync(configPath, JSON.stringify({ httpServerPort: server.port, dataDirectory: join(dir, "data") }));
  suite.defer(() => rmSync(dir, { recursive: true, force: true }));
  suite.defer(() => server.stop(true));
  return configPath;
}

const record = (fields: Record<string, unknown>) => ({
  id: "m1",
  queue: "a/v1",
  from: "g1",
  to: "g2",
  sourceEpoch: 7,
  state: "copying",
  phase: "starting",
  copied: 0,
  snapshot: 0,
  requestedBy: "g1-1",
  requestedAt: Date.now() - 3000,
  updatedAt: Date.now(),
  revision: 12,
  ...fields,
});

describe("kitten-mq move and rebalance", () => {
  it("rebalance --dry-run prints the plan; move --to --wait moves a queue with its messages; move --status lists it", async () => {
    const [g1, g2] = await twoGroups();

    const dry = await cli(["rebalance", "--dry-run", "--config", g1.configPath]);
    expect(dry).toEqual({
      code: 0,
      stdout: [
        "dry run: 1 move would even out the groups (weights g1 3 → 2, g2 1 → 2)",
        "QUEUE  MOVE     REASON",
        'a/v1   g1 → g2  weight 1: group "g1" 3 → 2, group "g2" 1 → 2',
        "",
      ].join("\n"),
      stderr: "",
    });
    const dryJson = JSON.parse((await cli(["rebalance", "--dry-run", "--max", "1", "--json", "--config", g2.configPath])).stdout);
    expect(dryJson).toEqual({
      dryRun: true,
      moves: [{ queue: "a/v1", from: "g1", to: "g2", reason: 'weight 1: group "g1" 3 → 2, group "g2" 1 → 2' }],
      before: { g1: 3, g2: 1 },
      after: { g1: 2, g2: 2 },
    });
    expect((await api(g1, "GET", "/moves")).moves).toEqual([]); // a dry run moves nothing

    for (let n = 0; n < 20; n++) await api(g1, "POST", "/publish", { channel: `c/v1/${n % 2}`, body: { n } });
    // Asked through g2's admin API: g1, the source group's master, runs it.
    const moved = await cli(["move", "c/v1", "--to", "g2", "--wait", "--config", g2.configPath]);
    expect(moved.stderr).toBe("");
    expect(moved.code).toBe(0);
    const lines = moved.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^move \S+: c\/v1 from group g1 to g2: copying \(starting\)$/);
    expect(lines.at(-1)).toMatch(/^done: c\/v1 is on group g2 \(20 messages copied, sends held \d+ ms, \d+\.\d s\)$/);
    const onTarget = await api(g2, "GET", "/queues/c/v1");
    expect(onTarget).toMatchObject({ name: "c/v1", group: "g2", depth: { waiting: 20 } });
    await waitFor(async () => (await api(g1, "GET", "/queues/c/v1")).code === "NOT_FOUND", 5000, "g1 dropped c/v1");

    const status = await cli(["move", "--status", "--config", g1.configPath]);
    expect(status.code).toBe(0);
    expect(status.stdout).toMatch(
      /^QUEUE  MOVE     STATE  COPIED  FENCE MS  AGE  REASON\nc\/v1   g1 → g2  done   20\/20 +\d+ +\d+s +-\n$/,
    );
    const statusJson = JSON.parse((await cli(["move", "--status", "--json", "--config", g1.configPath])).stdout);
    expect(statusJson.moves).toHaveLength(1);
    expect(statusJson.moves[0]).toMatchObject({ queue: "c/v1", from: "g1", to: "g2", state: "done", copied: 20, snapshot: 20, requestedBy: "g2-1" });
    const one = await cli(["move", "c/v1", "--status", "--config", g2.configPath]);
    expect(one.stdout.split("\n")[1]).toMatch(/^c\/v1 +g1 → g2 +done +20\/20 /);
    const never = await cli(["move", "b/v1", "--status", "--config", g2.configPath]);
    expect(never).toEqual({ code: 1, stdout: "", stderr: 'kitten-mq: NOT_FOUND: Cannot find a move of queue "b/v1": none is recorded\n' });

    // 2 queues each now (c/v1's rate adds a little to g2): nothing to do.
    expect(JSON.parse((await cli(["rebalance", "--dry-run", "--json", "--config", g1.configPath])).stdout).moves).toEqual([]);

    // Refusals: the broker's code and message, exit 1; --json prints them.
    const refused = await cli(["move", "a/v1", "--to", "g9", "--config", g1.configPath]);
    expect(refused).toEqual({
      code: 1,
      stdout: "",
      stderr: 'kitten-mq: MOVE_REFUSED: Cannot move queue "a/v1" to group "g9": no broker of group "g9" is registered in etcd\n',
    });
    const refusedJson = await cli(["move", "a/v1", "--to", "g1", "--json", "--config", g1.configPath]);
    expect(refusedJson.code).toBe(1);
    expect(JSON.parse(refusedJson.stdout)).toEqual({ code: "MOVE_REFUSED", message: 'Cannot move queue "a/v1" to group "g1": that group owns it already' });
  }, 90_000);

  it("move and rebalance usage mistakes exit 2 with one line", async () => {
    const cases: [string[], string][] = [
      [["move"], "move needs a queue (endpoint/version) and --to GROUP, or --status (see kitten-mq move --help)"],
      [["move", "a/v1"], 'move needs --to GROUP: the group to move "a/v1" to (see kitten-mq move --help)'],
      [["move", "orders", "--to", "g2"], 'Cannot move "orders": must be "endpoint/version" (see kitten-mq move --help)'],
      [["move", "a/v1", "b/v1", "--to", "g2"], 'move takes one queue: got "a/v1" "b/v1" (see kitten-mq move --help)'],
      [["move", "--status", "--to", "g2"], "move --status shows moves: it takes no --to nor --wait (see kitten-mq move --help)"],
      [["move", "a/v1", "--to"], "--to needs a value: GROUP (see kitten-mq move --help)"],
      [["rebalance", "--max", "0"], '--max must be an integer from 1 to 1000: current value is "0" (see kitten-mq rebalance --help)'],
      [["rebalance", "--max", "ten"], '--max must be an integer from 1 to 1000: current value is "ten" (see kitten-mq rebalance --help)'],
      [["rebalance", "now"], 'rebalance takes no argument: got "now" (see kitten-mq rebalance --help)'],
    ];
    for (const [args, message] of cases) {
      const result = await cli(args);
      expect({ args, ...result }).toEqual({ args, code: 2, stdout: "", stderr: `kitten-mq: ${message}\n` });
    }
  }, 30_000);

  it("move --wait exits 1 with the reason when the move is rolled back; --json prints the last record", async () => {
    let polls = 0;
    const configPath = fakeAdmin((method, path, body) => {
      if (method === "POST" && path === "/queues/a/v1/move") {
        expect(body).toEqual({ to: "g2" });
        return [202, record({})];
      }
      if (method === "GET" && path === "/moves/a/v1") {
        polls++;
        if (polls === 1) return [200, record({ phase: "snapshot", copied: 10, snapshot: 40 })];
        return [200, record({ state: "rolled-back", phase: "snapshot", copied: 10, snapshot: 40, reason: "the link to g2-1 closed", finishedAt: Date.now() })];
      }
      return [404, { code: "NOT_FOUND", message: `no route ${method} ${path}` }];
    });
    const text = await cli(["move", "a/v1", "--to", "g2", "--wait", "--config", configPath]);
    expect(text).toEqual({
      code: 1,
      stdout: "move m1: a/v1 from group g1 to g2: copying (starting)\n  snapshot: 10/40 copied\n",
      stderr: 'kitten-mq: the move of "a/v1" to group g2 was rolled back, the queue stays on group g1: the link to g2-1 closed\n',
    });
    polls = 0;
    const asJson = await cli(["move", "a/v1", "--to", "g2", "--wait", "--json", "--config", configPath]);
    expect(asJson.code).toBe(1);
    expect(JSON.parse(asJson.stdout)).toMatchObject({ id: "m1", state: "rolled-back", reason: "the link to g2-1 closed" });
  }, 30_000);

  it("rebalance prints each move asked for or refused, and exits 1 when one was refused", async () => {
    const configPath = fakeAdmin((method, path, body) => {
      expect([method, path, body]).toEqual(["POST", "/rebalance", { dryRun: false, max: 2 }]);
      return [202, {
        dryRun: false,
        moves: [
          { queue: "a/v1", from: "g1", to: "g2", reason: "r1", record: record({ id: "m1" }) },
          { queue: "c/v1", from: "g1", to: "g2", reason: "r2", error: { code: "MOVE_REFUSED", message: 'Cannot move queue "c/v1" to group "g2": group "g2" has no master now' } },
        ],
        before: { g1: 4, g2: 0 },
        after: { g1: 2, g2: 2 },
      }];
    });
    const result = await cli(["rebalance", "--max", "2", "--config", configPath]);
    expect(result).toEqual({
      code: 1,
      stdout: [
        "1 of 2 moves asked for (weights g1 4 → 2, g2 0 → 2 once done); follow them with kitten-mq move --status",
        "QUEUE  MOVE     RESULT",
        "a/v1   g1 → g2  copying (move m1)",
        'c/v1   g1 → g2  MOVE_REFUSED: Cannot move queue "c/v1" to group "g2": group "g2" has no master now',
        "",
      ].join("\n"),
      stderr: "",
    });
  }, 30_000);
});
