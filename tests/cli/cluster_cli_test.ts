/**
 * The CLI of several brokers: `kitten-mq status` shows the in-sync set and a slave's link, and
 * `kitten-mq reload` refuses to promote a slave that is not in sync unless `--force` is given.
 */
import { afterEach, expect, it } from "bun:test";
import { type BrokerProcess, cli, startBrokerProcess } from "./_broker.ts";

const started: BrokerProcess[] = [];
afterEach(async () => {
  for (const broker of started.splice(0)) await broker.stop();
});

async function broker(overrides: Record<string, unknown>): Promise<BrokerProcess> {
  const process = await startBrokerProcess(overrides);
  started.push(process);
  return process;
}

it("kitten-mq status: a master lists its in-sync set and minInSyncReplicas; a slave whose master is unreachable says so", async () => {
  // The peers named are not running: the master is alone in sync, the slave reaches no master.
  const master = await broker({ serviceId: "b0", cluster: { peers: ["127.0.0.1:1@b1"], minInSyncReplicas: 2 } });
  const status = await cli(["status", "--config", master.configPath]);
  expect(status.code).toBe(0);
  expect(status.stdout).toContain("cluster   manual  epoch 0  minInSyncReplicas 2  in sync: b0");

  const slave = await broker({ serviceId: "b1", isMaster: false, cluster: { peers: ["127.0.0.1:1@b0"] } });
  const slaveStatus = await cli(["status", "--config", slave.configPath]);
  expect(slaveStatus.stdout).toContain("  master (not reached)  searching");
  const json = JSON.parse((await cli(["status", "--config", slave.configPath, "--json"])).stdout);
  expect(json.cluster).toMatchObject({ mode: "manual", role: "slave", upstream: { state: "searching", master: null } });
}, 30_000);

it("kitten-mq reload refuses to promote a slave that is not in sync, saying how far behind it is; --force promotes it", async () => {
  const slave = await broker({ serviceId: "b1", isMaster: false, cluster: { peers: ["127.0.0.1:1@b0"] } });
  slave.writeConfig({ ...JSON.parse(await Bun.file(slave.configPath).text()), isMaster: true });
  const refused = await cli(["reload", "--config", slave.configPath]);
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain('NOT_IN_SYNC: Cannot promote "b1" to master: not in sync: no master reached among cluster.peers (127.0.0.1:1@b0)');
  expect(refused.stderr).toContain("kitten-mq reload --force does it anyway");
  expect((await cli(["status", "--config", slave.configPath, "--json"])).stdout).toContain('"role": "slave"');

  const forced = await cli(["reload", "--force", "--config", slave.configPath]);
  expect(forced.code).toBe(0);
  expect(JSON.parse((await cli(["status", "--config", slave.configPath, "--json"])).stdout).role).toBe("master");
  expect(slave.output()).toContain("promotion forced while not in sync");
}, 30_000);

it("kitten-mq status and GET /metrics name the broker's group (cluster.group)", async () => {
  // etcd is not running: the broker serves its admin API while it retries, and says its group.
  const grouped = await broker({ serviceId: "g2-a", cluster: { group: "g2", etcd: { endpoints: ["http://127.0.0.1:1"] } } });
  const status = await cli(["status", "--config", grouped.configPath]);
  expect(status.code).toBe(0);
  expect(status.stdout).toContain("cluster   etcd  group g2  epoch");
  const json = JSON.parse((await cli(["status", "--config", grouped.configPath, "--json"])).stdout);
  expect(json.cluster).toMatchObject({ mode: "etcd", group: "g2" });
  const metrics = await (await fetch(`${grouped.adminUrl}/metrics`)).text();
  expect(metrics).toContain('kitten_mq_cluster_group_info{group="g2"} 1');
});
