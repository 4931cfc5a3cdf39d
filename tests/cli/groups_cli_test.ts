/**
 * `kitten-mq groups` against brokers started as an operator does: real etcd, groups g1 and g2
 * with one broker process each (a/v1 placed on g1, b/v1 on g2), and one broker without etcd.
 */
import { afterAll, afterEach, beforeAll, expect, it } from "bun:test";
import { waitFor } from "../helpers/broker.ts";
import { testPrefix } from "../helpers/election.ts";
import { type EtcdCluster, startEtcd } from "../helpers/etcd.ts";
import { type BrokerProcess, cli, startBrokerProcess } from "./_broker.ts";

let etcd: EtcdCluster;
const started: BrokerProcess[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
});
afterEach(async () => {
  for (const broker of started.splice(0)) await broker.stop();
});
afterAll(async () => {
  await etcd?.cleanup();
});

async function broker(overrides: Record<string, unknown>): Promise<BrokerProcess> {
  const process = await startBrokerProcess({ socketServer: { port: 0, host: "127.0.0.1" }, ...overrides });
  started.push(process);
  return process;
}

interface Groups {
  enabled: boolean;
  epoch: number;
  group: string;
  groups: Record<string, { brokers: string[]; queues: string[] }>;
}

async function groupsOf(process: BrokerProcess): Promise<Groups> {
  return await (await fetch(`${process.adminUrl}/groups`)).json() as Groups;
}

it("kitten-mq groups prints each group with its brokers and queues, the map epoch and the broker's own group", async () => {
  const prefix = testPrefix();
  const channels = { "a/v1": { group: "g1" }, "b/v1": { group: "g2" } };
  const cluster = (group: string) => ({ peers: [], minInSyncReplicas: 1, group, etcd: { endpoints: etcd.endpoints, leaseTtlSeconds: 2, prefix } });
  const [g1, g2] = await Promise.all(["g1", "g2"].map((group) => broker({ serviceId: `${group}-1`, channels, cluster: cluster(group) })));
  await waitFor(async () => {
    const views = await Promise.all([groupsOf(g1!), groupsOf(g2!)]);
    return views.every((view) =>
      view.groups.g1?.queues.includes("a/v1") && view.groups.g2?.queues.includes("b/v1") &&
      view.groups.g1.brokers.length === 1 && view.groups.g2.brokers.length === 1
    );
  }, 15_000, "both brokers see both groups and both queues placed");

  const json = await cli(["groups", "--json", "--config", g1!.configPath]);
  expect(json.code).toBe(0);
  const view = JSON.parse(json.stdout) as Groups;
  expect(view).toMatchObject({ enabled: true, group: "g1" });
  expect(view.epoch).toBeGreaterThan(0);

  const text = await cli(["groups", "--config", g1!.configPath]);
  expect(text.code).toBe(0);
  // The epoch is etcd's revision as last seen: other keys of the prefix (members, load) may raise it.
  const epoch = Number(/^map epoch (\d+) /.exec(text.stdout)?.[1]);
  expect(epoch).toBeGreaterThanOrEqual(view.epoch);
  expect(text.stdout).toBe([
    `map epoch ${epoch}    this broker: group g1    2 groups`,
    "",
    "group g1 (this broker's group): 1 broker, 1 queue",
    `  brokers  127.0.0.1:${g1!.port}@g1-1`,
    "  queues   a/v1",
    "",
    "group g2: 1 broker, 1 queue",
    `  brokers  127.0.0.1:${g2!.port}@g2-1`,
    "  queues   b/v1",
    "",
  ].join("\n"));
  // The other broker names its own group.
  expect((await cli(["groups", "--config", g2!.configPath])).stdout).toContain("this broker: group g2");
  expect((await cli(["groups", "--config", g2!.configPath])).stdout).toContain("group g2 (this broker's group): 1 broker, 1 queue");

  // -q: where one queue lives.
  const owner = await cli(["groups", "-q", "b/v1", "--config", g1!.configPath]);
  expect(owner.code).toBe(0);
  expect(owner.stdout).toMatch(new RegExp(`^b/v1: group g2  brokers 127\\.0\\.0\\.1:${g2!.port}@g2-1  \\(map epoch \\d+\\)\n$`));
  const ownerJson = JSON.parse((await cli(["groups", "-q", "a/v1", "--json", "--config", g2!.configPath])).stdout);
  expect(ownerJson).toMatchObject({ queue: "a/v1", group: "g1", brokers: [`127.0.0.1:${g1!.port}@g1-1`], enabled: true });
  const unplaced = await cli(["groups", "-q", "nowhere/v1", "--config", g1!.configPath]);
  expect(unplaced.code).toBe(1);
  expect(unplaced.stderr).toContain('queue "nowhere/v1" is on no group yet: a queue is placed when a client first uses it');
  const bad = await cli(["groups", "-q", "not-a-queue", "--config", g1!.configPath]);
  expect(bad.code).toBe(2);
  expect(bad.stderr).toContain('Cannot use -q "not-a-queue": must be "endpoint/version"');
}, 60_000);

it("kitten-mq groups on a broker without cluster.etcd says it has no queue map", async () => {
  const solo = await broker({});
  const text = await cli(["groups", "--config", solo.configPath]);
  expect(text.code).toBe(0);
  expect(text.stdout).toBe(
    "no queue map: this broker has no cluster.etcd, so queues are not spread over groups; it serves every queue itself (group default)\n",
  );
  const json = JSON.parse((await cli(["groups", "--json", "--config", solo.configPath])).stdout);
  expect(json).toEqual({ enabled: false, epoch: 0, group: "default", groups: {} });
  const owner = await cli(["groups", "-q", "orders/v1", "--config", solo.configPath]);
  expect(owner.stdout).toBe("orders/v1: no queue map (no cluster.etcd); this broker serves it (group default)\n");
}, 30_000);
