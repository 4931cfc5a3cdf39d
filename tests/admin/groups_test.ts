/**
 * The queue map on the admin API: GET /groups, the `group` of each queue in GET /queues, and
 * the map's gauges in GET /metrics (checked by promtool). Real etcd, two groups, one
 * in-process broker each (every one master of its group); and one broker without etcd.
 */
import { describe, expect, it } from "bun:test";
import type { Hono } from "hono";
import { MAX_QUEUE_GROUP_SERIES, writeGroupMetrics } from "../../src/admin/groups.ts";
import { Exposition } from "../../src/admin/exposition.ts";
import { encode } from "../../src/protocol/cbor.ts";
import type { BrokerServer } from "../../src/server/mod.ts";
import { waitFor } from "../helpers/broker.ts";
import { testPrefix } from "../helpers/election.ts";
import { adminBroker, etcdSuite } from "../helpers/etcd_suite.ts";

interface Served {
  server: BrokerServer;
  app: Hono;
  port: number;
  get(path: string): Promise<{ status: number; body: any; text: string }>;
}

const suite = etcdSuite();

/** A broker with its admin app (called without a port). */
function serve(overrides: Record<string, unknown> = {}): Served {
  const { server, app } = adminBroker(suite, overrides);
  return {
    server,
    app,
    port: server.port,
    async get(path) {
      const response = await app.request(path);
      const text = await response.text();
      let body: unknown = null;
      try {
        body = JSON.parse(text);
      } catch { /* metrics */ }
      return { status: response.status, body, text };
    },
  };
}

/** Groups g1 and g2 sharing one prefix; a/v1 is placed on g1 and b/v1 on g2 (channels[q].group). */
async function twoGroups(): Promise<[Served, Served]> {
  const prefix = testPrefix();
  const channels = { "a/v1": { group: "g1" }, "b/v1": { group: "g2" } };
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
      const groups = server.broker.placement.status()!.groups;
      return groups.g1?.queues.includes("a/v1") && groups.g2?.queues.includes("b/v1") &&
        groups.g1.brokers.length === 1 && groups.g2.brokers.length === 1;
    }), 10_000, "both brokers see both groups and both queues placed");
  return [g1, g2];
}

async function send(served: Served, channel: string): Promise<void> {
  const { broker } = served.server;
  await broker.send(channel, `m-${channel}-${Math.random()}`, encode({ hello: 1 }), { clientId: "sender", grants: broker.rules.forClient("sender") });
  broker.flush();
}

function promtool(text: string): { code: number; output: string } {
  const binary = Bun.which("promtool");
  if (binary === null) throw new Error("promtool is missing: apt-get install -y prometheus (it provides promtool; .ci/run installs it)");
  const result = Bun.spawnSync([binary, "check", "metrics"], { stdin: new TextEncoder().encode(text) });
  return { code: result.exitCode, output: result.stdout.toString() + result.stderr.toString() };
}

describe("admin groups", () => {
  it("GET /groups lists every group with its brokers and queues, the map epoch and the broker's own group", async () => {
    const [g1, g2] = await twoGroups();
    const brokers = { g1: [`127.0.0.1:${g1.port}@g1-1`], g2: [`127.0.0.1:${g2.port}@g2-1`] };
    for (const [served, own] of [[g1, "g1"], [g2, "g2"]] as const) {
      const before = served.server.broker.placement.epoch;
      const { status, body } = await served.get("/groups");
      expect(status).toBe(200);
      // The epoch is etcd's revision as last seen: other keys of the prefix (members, load) may raise it meanwhile.
      expect(body.epoch).toBeGreaterThanOrEqual(before);
      expect(body.epoch).toBeLessThanOrEqual(served.server.broker.placement.epoch);
      expect(body).toEqual({
        enabled: true,
        epoch: body.epoch,
        group: own,
        groups: {
          g1: { brokers: brokers.g1, queues: ["a/v1"], queueCount: 1 },
          g2: { brokers: brokers.g2, queues: ["b/v1"], queueCount: 1 },
        },
      });
      expect(body.epoch).toBeGreaterThan(0);
    }
    // `limit` keeps a page of each group's queues; the count stays whole.
    const limited = await g1.get("/groups?limit=0");
    expect(limited.body.groups.g1).toEqual({ brokers: brokers.g1, queues: [], queueCount: 1 });
    const bad = await g1.get("/groups?limit=ten");
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual({ code: "BAD_REQUEST", message: 'Cannot read query parameter "limit": must be an integer >= 0: current value is "ten"' });
  }, 30_000);

  it("GET /queues and GET /queues/:endpoint/:version name the group that owns each queue", async () => {
    const [g1, g2] = await twoGroups();
    await send(g1, "a/v1/1");
    await send(g2, "b/v1/1");
    // Queue objects a broker can hold without owning them (one left behind by a move, say): the
    // map's owner is shown, not the broker's own group, and null for a queue no group owns.
    g1.server.broker.queue("b/v1");
    g1.server.broker.queue("loose/v1");
    const listed = await g1.get("/queues");
    expect(listed.body.queues.map((q: { name: string; group: string }) => [q.name, q.group])).toEqual([["a/v1", "g1"], ["b/v1", "g2"], ["loose/v1", null]]);
    expect((await g1.get("/queues/b/v1")).body.group).toBe("g2");
    expect((await g1.get("/queues/loose/v1")).body.group).toBe(null);
    expect((await g1.get("/queues/a/v1")).body).toMatchObject({ name: "a/v1", group: "g1", depth: { waiting: 1 } });
    expect((await g2.get("/queues/b/v1")).body).toMatchObject({ name: "b/v1", group: "g2" });
  }, 30_000);

  it("GET /metrics has the map epoch, queues and brokers per group, and each queue's group; promtool accepts it", async () => {
    const [g1] = await twoGroups();
    const before = g1.server.broker.placement.epoch;
    const { text } = await g1.get("/metrics");
    const epoch = Number(/^kitten_mq_map_epoch (\d+)$/m.exec(text)?.[1]);
    expect(epoch).toBeGreaterThanOrEqual(before);
    expect(epoch).toBeLessThanOrEqual(g1.server.broker.placement.epoch);
    expect(text).toContain(`# TYPE kitten_mq_map_epoch gauge\nkitten_mq_map_epoch ${epoch}\n`);
    expect(text).toContain('# TYPE kitten_mq_group_queues gauge\nkitten_mq_group_queues{group="g1"} 1\nkitten_mq_group_queues{group="g2"} 1\n');
    expect(text).toContain('# TYPE kitten_mq_group_brokers gauge\nkitten_mq_group_brokers{group="g1"} 1\nkitten_mq_group_brokers{group="g2"} 1\n');
    expect(text).toContain(
      '# TYPE kitten_mq_queue_group_info gauge\nkitten_mq_queue_group_info{queue="a/v1",group="g1"} 1\nkitten_mq_queue_group_info{queue="b/v1",group="g2"} 1\n',
    );
    const checked = promtool(text);
    expect(checked.output).toBe("");
    expect(checked.code).toBe(0);
  }, 30_000);

  it("without cluster.etcd: GET /groups says so, queues are on the broker's own group, /metrics has no map gauges", async () => {
    const solo = serve();
    const { body } = await solo.get("/groups");
    expect(body).toEqual({ enabled: false, epoch: 0, group: "default", groups: {} });
    await send(solo, "orders/v1/1");
    expect((await solo.get("/queues")).body.queues[0]).toMatchObject({ name: "orders/v1", group: "default" });
    expect((await solo.get("/queues/orders/v1")).body.group).toBe("default");
    const { text } = await solo.get("/metrics");
    expect(text).toContain('kitten_mq_cluster_group_info{group="default"} 1');
    for (const name of ["kitten_mq_map_epoch", "kitten_mq_group_queues", "kitten_mq_group_brokers", "kitten_mq_queue_group_info"]) {
      expect(text).not.toContain(name);
    }
  });

  it("kitten_mq_queue_group_info is capped at MAX_QUEUE_GROUP_SERIES series, the first queues by name; the counts stay whole", () => {
    const count = MAX_QUEUE_GROUP_SERIES + 5;
    const name = (i: number) => `q${String(i).padStart(6, "0")}/v1`;
    const queues = { g1: [] as string[], g2: [] as string[] };
    for (let i = 0; i < count; i++) queues[i % 2 === 0 ? "g1" : "g2"].push(name(i));
    // Only what writeGroupMetrics reads of a broker: its placement and its group.
    const server = {
      broker: {
        config: { cluster: { group: "g1" } },
        placement: {
          enabled: true,
          status: () => ({ epoch: 7, group: "g1", groups: { g1: { brokers: ["h:1@a"], queues: queues.g1 }, g2: { brokers: [], queues: queues.g2 } } }),
        },
      },
    } as unknown as BrokerServer;
    const out = new Exposition();
    writeGroupMetrics(out, server);
    const text = out.toString();
    const series = text.split("\n").filter((line) => line.startsWith("kitten_mq_queue_group_info{"));
    expect(series).toHaveLength(MAX_QUEUE_GROUP_SERIES);
    expect(series[0]).toBe(`kitten_mq_queue_group_info{queue="${name(0)}",group="g1"} 1`);
    expect(series[1]).toBe(`kitten_mq_queue_group_info{queue="${name(1)}",group="g2"} 1`);
    expect(series.at(-1)).toBe(`kitten_mq_queue_group_info{queue="${name(MAX_QUEUE_GROUP_SERIES - 1)}",group="g2"} 1`);
    expect(text).toContain(`kitten_mq_group_queues{group="g1"} ${Math.ceil(count / 2)}\nkitten_mq_group_queues{group="g2"} ${Math.floor(count / 2)}\n`);
    expect(text).toContain('kitten_mq_group_brokers{group="g1"} 1\nkitten_mq_group_brokers{group="g2"} 0\n');
    expect(text).toContain(`# HELP kitten_mq_queue_group_info Always 1: the group that owns a queue, as a label; at most ${MAX_QUEUE_GROUP_SERIES} series`);
  });
});
