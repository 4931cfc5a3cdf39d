/**
 * Moving queues through the admin API: POST /queues/:endpoint/:version/move, GET /moves,
 * GET /moves/:endpoint/:version and POST /rebalance. Real etcd, two groups with one in-process
 * broker each (every one master of its group, a real move between them); and one broker without
 * etcd.
 */
import { describe, expect, it } from "bun:test";
import type { Hono } from "hono";
import { encode } from "../../src/protocol/cbor.ts";
import type { BrokerServer } from "../../src/server/mod.ts";
import { waitFor } from "../helpers/broker.ts";
import { testPrefix } from "../helpers/election.ts";
import { adminBroker, etcdSuite } from "../helpers/etcd_suite.ts";

interface Served {
  server: BrokerServer;
  app: Hono;
  call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<{ status: number; body: any }>;
}

const suite = etcdSuite();

/** A broker with its admin app (called without a port) and its own key pair folder: a move links the two masters as peers. */
function serve(overrides: Record<string, unknown> = {}): Served {
  const { server, app } = adminBroker(suite, overrides);
  return {
    server,
    app,
    async call(method, path, body, headers = {}) {
      const init: RequestInit = { method, headers: { ...headers } };
      if (body !== undefined) {
        init.body = typeof body === "string" ? body : JSON.stringify(body);
        (init.headers as Record<string, string>)["Content-Type"] = "application/json";
      }
      const response = await app.request(path, init);
      return { status: response.status, body: await response.json().catch(() => null) };
    },
  };
}

/** Groups g1 and g2 sharing one prefix; `onG1` (default a/v1, c/v1) are placed on g1, b/v1 on g2. */
async function twoGroups(onG1 = ["a/v1", "c/v1"]): Promise<[Served, Served]> {
  const prefix = testPrefix();
  const channels: Record<string, { group: string }> = { "b/v1": { group: "g2" } };
  for (const queue of onG1) channels[queue] = { group: "g1" };
  const [g1, g2] = ["g1", "g2"].map((group) =>
    serve({
      serviceId: `${group}-1`,
      channels,
      cluster: suite.groupCluster(group, prefix),
    })
  ) as [Served, Served];
  await waitFor(() => g1.server.broker.isMaster && g2.server.broker.isMaster, 10_000, "each group elects its master");
  await waitFor(() =>
    [g1, g2].every(({ server }) => {
      const { placement } = server.broker;
      const groups = placement.status()!.groups;
      return groups.g1?.queues.length === onG1.length && groups.g2?.queues.includes("b/v1") && groups.g1.brokers.length === 1 &&
        groups.g2.brokers.length === 1 && placement.map?.leader("g1") && placement.map?.leader("g2");
    }), 10_000, "both brokers see both groups, their masters and every queue placed");
  return [g1, g2];
}

async function send(served: Served, channel: string, count: number): Promise<void> {
  const { broker } = served.server;
  for (let n = 0; n < count; n++) {
    await broker.send(channel, `m-${channel}-${n}`, encode({ n }), { clientId: "sender", grants: broker.rules.forClient("sender") });
  }
  broker.flush();
}

const owner = (served: Served, queue: string) =>
  Object.entries(served.server.broker.placement.status()!.groups).find(([, g]) => g.queues.includes(queue))?.[0];

describe("admin moves", () => {
  it("POST /queues/:endpoint/:version/move moves a queue with its messages; GET /moves and GET /moves/:queue follow it", async () => {
    const [g1, g2] = await twoGroups();
    await send(g1, "a/v1/1", 30);
    await send(g1, "a/v1/2", 20);
    expect(g1.server.broker.queues.get("a/v1")?.held).toBe(50);

    // Asked on g2 (any broker records it); g1, the source group's master, runs it.
    const asked = await g2.call("POST", "/queues/a/v1/move", { to: "g2" });
    expect(asked.status).toBe(202);
    expect(asked.body).toMatchObject({ queue: "a/v1", from: "g1", to: "g2", state: "copying", requestedBy: "g2-1" });
    expect(typeof asked.body.id).toBe("string");

    await waitFor(async () => (await g1.call("GET", "/moves/a/v1")).body?.state === "done", 20_000, "the move is done");
    await waitFor(() => owner(g2, "a/v1") === "g2" && !g1.server.broker.queues.has("a/v1"), 5000, "g2 owns the queue, g1 dropped it");
    // Every message is on the target, none left on the source.
    expect(g2.server.broker.queues.get("a/v1")?.held).toBe(50);
    expect((await g2.call("GET", "/queues/a/v1")).body).toMatchObject({ name: "a/v1", group: "g2", depth: { waiting: 50 } });

    const one = await g2.call("GET", "/moves/a%2Fv1");
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({ id: asked.body.id, queue: "a/v1", from: "g1", to: "g2", state: "done", snapshot: 50 });
    expect(one.body.copied).toBeGreaterThanOrEqual(50);
    expect(typeof one.body.fenceMs).toBe("number");
    expect(typeof one.body.finishedAt).toBe("number");
    const all = await g1.call("GET", "/moves");
    expect(all.status).toBe(200);
    expect(all.body.moves.map((m: { queue: string; state: string }) => [m.queue, m.state])).toEqual([["a/v1", "done"]]);

    // The %2F form of the route: c/v1, empty, to g2.
    const other = await g1.call("POST", "/queues/c%2Fv1/move", { to: "g2" });
    expect(other.status).toBe(202);
    expect(other.body).toMatchObject({ queue: "c/v1", from: "g1", to: "g2", state: "copying", requestedBy: "g1-1" });
    await waitFor(async () => (await g1.call("GET", "/moves/c/v1")).body?.state === "done", 20_000, "the move of c/v1 is done");
    expect((await g2.call("GET", "/moves")).body.moves.map((m: { queue: string }) => m.queue).sort()).toEqual(["a/v1", "c/v1"]);
  }, 60_000);

  it("a queue moved back to the group it left keeps its messages", async () => {
    const [g1, g2] = await twoGroups();
    await send(g1, "a/v1/1", 50);
    expect((await g1.call("POST", "/queues/a/v1/move", { to: "g2" })).status).toBe(202);
    await waitFor(() => owner(g1, "a/v1") === "g2" && !g1.server.broker.queues.has("a/v1"), 20_000, "moved to g2");
    expect(g2.server.broker.queues.get("a/v1")?.held).toBe(50);
    expect((await g2.call("POST", "/queues/a/v1/move", { to: "g1" })).status).toBe(202);
    await waitFor(async () => (await g1.call("GET", "/moves/a/v1")).body?.from === "g2" && (await g1.call("GET", "/moves/a/v1")).body?.state === "done",
      20_000, "the move back is done");
    await waitFor(() => !g2.server.broker.queues.has("a/v1"), 5000, "g2 dropped it");
    expect(g1.server.broker.queues.get("a/v1")?.held ?? 0).toBe(50);
  }, 60_000);

  it("refusals: BAD_REQUEST for a bad body or queue name, MOVE_REFUSED (409) with why, NOT_FOUND for a queue never moved", async () => {
    const [g1] = await twoGroups();
    const post = (path: string, body?: unknown) => g1.call("POST", path, body);
    const refused = async (path: string, body: unknown, status: number, code: string, message: string) => {
      const answer = await post(path, body);
      expect({ path, body, status: answer.status, answer: answer.body }).toEqual({ path, body, status, answer: { code, message } });
    };
    const shape = '; send {"to": "<group>"}';
    await refused("/queues/a/v1/move", "{to:", 400, "BAD_REQUEST", `Cannot move queue "a/v1": the request body is not JSON: JSON Parse error: Expected '}'${shape}`);
    await refused("/queues/a/v1/move", "null", 400, "BAD_REQUEST", `Cannot move queue "a/v1": the request body must be a JSON object${shape}`);
    await refused("/queues/a/v1/move", {}, 400, "BAD_REQUEST", `Cannot move queue "a/v1": to is missing${shape}`);
    await refused("/queues/a/v1/move", { to: 2 }, 400, "BAD_REQUEST", `Cannot move queue "a/v1": to: must be a string: a group name${shape}`);
    await refused("/queues/a/v1/move", { to: "g/2" }, 400, "BAD_REQUEST",
      `Cannot move queue "a/v1": to: must be 1 to 64 of letters, digits, ".", "_", "-"${shape}`);
    await refused("/queues/a/v1/move", { to: "g2", now: true }, 400, "BAD_REQUEST", `Cannot move queue "a/v1": now: unknown key${shape}`);
    await refused("/queues/a.b/v1/move", { to: "g2" }, 400, "BAD_REQUEST", 'Cannot move queue "a.b/v1": endpoint "a.b" must be 1 to 64 letters, digits, "-" or "_"');
    await refused("/queues/orders/move", { to: "g2" }, 400, "BAD_REQUEST",
      'Cannot move queue "orders": queues are named "endpoint/version" (/queues/endpoint/version/move or /queues/endpoint%2Fversion/move)');

    await refused("/queues/a/v1/move", { to: "g9" }, 409, "MOVE_REFUSED", 'Cannot move queue "a/v1" to group "g9": no broker of group "g9" is registered in etcd');
    await refused("/queues/a/v1/move", { to: "g1" }, 409, "MOVE_REFUSED", 'Cannot move queue "a/v1" to group "g1": that group owns it already');
    await refused("/queues/nowhere/v1/move", { to: "g2" }, 409, "MOVE_REFUSED",
      'Cannot move queue "nowhere/v1" to group "g2": no group owns it yet (a queue is placed when a client first uses it)');
    // A second move of a queue while the first is copying.
    await send(g1, "c/v1/1", 2000);
    const first = await post("/queues/c/v1/move", { to: "g2" });
    expect(first.status).toBe(202);
    const second = await post("/queues/c/v1/move", { to: "g2" });
    expect(second.status).toBe(409);
    expect(second.body.code).toBe("MOVE_REFUSED");
    expect(second.body.message).toStartWith('Cannot move queue "c/v1" to group "g2": a move to group "g2" is in progress (asked at ');
    await waitFor(async () => (await g1.call("GET", "/moves/c/v1")).body?.state === "done", 20_000, "the first move ends");

    const missing = await g1.call("GET", "/moves/b/v1");
    expect(missing).toEqual({ status: 404, body: { code: "NOT_FOUND", message: 'Cannot find a move of queue "b/v1": none is recorded' } });
    expect(await g1.call("GET", "/moves/b")).toEqual({
      status: 400,
      body: { code: "BAD_REQUEST", message: 'Cannot find the move of queue "b": queues are named "endpoint/version" (/moves/endpoint/version or /moves/endpoint%2Fversion)' },
    });
    // Nothing was recorded by any refusal.
    expect(g1.server.broker.moves.status().map((m) => m.queue)).toEqual(["c/v1"]);
  }, 60_000);

  it("POST /rebalance: a dry run returns the plan; otherwise the moves are asked for and reach done", async () => {
    // 5 queues on g1 against 1 on g2: 2 moves even them out.
    const [g1, g2] = await twoGroups(["a/v1", "c/v1", "d/v1", "e/v1", "f/v1"]);
    const count = (group: string) => g1.server.broker.placement.status()!.groups[group]!.queues.length;

    const bad = await g1.call("POST", "/rebalance", { dryRun: "yes" });
    expect(bad).toEqual({ status: 400, body: { code: "BAD_REQUEST", message: 'Cannot rebalance: dryRun: must be true or false; send {"dryRun": true, "max": 10}' } });
    expect((await g1.call("POST", "/rebalance", { max: 0 })).body.message).toBe('Cannot rebalance: max: must be >= 1; send {"dryRun": true, "max": 10}');
    expect((await g1.call("POST", "/rebalance", { dryRun: true, now: 1 })).body.message).toBe('Cannot rebalance: now: unknown key; send {"dryRun": true, "max": 10}');
    expect((await g1.call("POST", "/rebalance")).body.code).toBe("BAD_REQUEST"); // no body: say what to send

    const dry = await g1.call("POST", "/rebalance", { dryRun: true });
    expect(dry.status).toBe(200);
    expect(dry.body).toEqual({
      dryRun: true,
      moves: [
        { queue: "a/v1", from: "g1", to: "g2", reason: 'weight 1: group "g1" 5 → 4, group "g2" 1 → 2' },
        { queue: "c/v1", from: "g1", to: "g2", reason: 'weight 1: group "g1" 4 → 3, group "g2" 2 → 3' },
      ],
      before: { g1: 5, g2: 1 },
      after: { g1: 3, g2: 3 },
    });
    expect(g1.server.broker.moves.status()).toEqual([]); // a dry run asks for nothing
    const capped = await g1.call("POST", "/rebalance", { dryRun: true, max: 1 });
    expect(capped.body.moves.map((m: { queue: string }) => m.queue)).toEqual(["a/v1"]);
    expect(capped.body.after).toEqual({ g1: 4, g2: 2 });

    // Asked on g2: the moves are recorded there and run by g1's master.
    const run = await g2.call("POST", "/rebalance", { dryRun: false });
    expect(run.status).toBe(202);
    expect(run.body.before).toEqual({ g1: 5, g2: 1 });
    expect(run.body.moves.map((m: { queue: string }) => m.queue)).toEqual(["a/v1", "c/v1"]);
    for (const move of run.body.moves) {
      expect(move).toMatchObject({ from: "g1", to: "g2", record: { queue: move.queue, from: "g1", to: "g2", state: "copying", requestedBy: "g2-1" } });
      expect(move.error).toBeUndefined();
    }
    // While they copy, another rebalance leaves them alone (asked on g2, which recorded them: g1
    // hears of the records through its watch a moment later).
    const during = await g2.call("POST", "/rebalance", { dryRun: true });
    expect(during.body.moves.map((m: { queue: string }) => m.queue)).not.toContain("a/v1");
    await waitFor(() => count("g1") === 3 && count("g2") === 3 && g1.server.broker.moves.status().every((m) => m.state === "done"), 30_000,
      "the two moves are done");
    // Balanced now: nothing more to do.
    expect((await g1.call("POST", "/rebalance", { dryRun: true })).body.moves).toEqual([]);
  }, 90_000);

  it("without cluster.etcd: moves are refused (409), GET /moves is empty, the routes need the admin token", async () => {
    const solo = serve({ admin: { token: "t0ken" } });
    const auth = { Authorization: "Bearer t0ken" };
    expect((await solo.call("POST", "/queues/a/v1/move", { to: "g2" })).status).toBe(401);
    expect((await solo.call("POST", "/rebalance", { dryRun: true })).status).toBe(401);
    expect((await solo.call("GET", "/moves")).status).toBe(401);
    const refused = await solo.call("POST", "/queues/a/v1/move", { to: "g2" }, auth);
    expect(refused.status).toBe(409);
    expect(refused.body).toEqual({
      code: "MOVE_REFUSED",
      message: 'Cannot move queue "a/v1": this broker spreads no queues over groups (no cluster.etcd), or has not read the map yet',
    });
    expect(await solo.call("GET", "/moves", undefined, auth)).toEqual({ status: 200, body: { moves: [] } });
    expect((await solo.call("GET", "/moves/a/v1", undefined, auth)).status).toBe(404);
    const rebalance = await solo.call("POST", "/rebalance", { dryRun: true }, auth);
    expect(rebalance.status).toBe(409);
    expect(rebalance.body.code).toBe("MOVE_REFUSED");
  });

  it("etcd not answering: POST /queues/:endpoint/:version/move is STORE_UNAVAILABLE (503)", async () => {
    const [g1] = await twoGroups();
    const node = suite.etcd.nodes[0]!;
    node.pause();
    try {
      const answer = await g1.call("POST", "/queues/a/v1/move", { to: "g2" });
      expect(answer.status).toBe(503);
      expect(answer.body.code).toBe("STORE_UNAVAILABLE");
      expect(answer.body.message).toStartWith('Cannot record the move of "a/v1": etcd did not answer: ');
    } finally {
      node.resume();
    }
  }, 30_000);
});
