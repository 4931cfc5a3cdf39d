/**
 * The lease keeper's single renewals against real etcd nodes (etcd_client.ts EndpointRenewals):
 * each goes to the node it names, answers with the lease's TTL (0 once the lease is gone), and a
 * follower that hangs fails only the renewals sent through it, within their deadline, while the
 * leader renews the same lease.
 */
import { afterAll, beforeAll, expect, it } from "bun:test";
import { Etcd3 } from "etcd3";
import { EndpointRenewals } from "../../../src/server/cluster/etcd_client.ts";
import { type EtcdCluster, startEtcdCluster } from "../../helpers/etcd.ts";

let etcd: EtcdCluster;
let client: Etcd3;
beforeAll(async () => {
  etcd = await startEtcdCluster(3);
  client = new Etcd3({ hosts: etcd.endpoints });
}, 60_000);
afterAll(async () => {
  client?.close();
  await etcd?.cleanup();
});

it("a renewal through any node answers the lease's TTL, and 0 once the lease is revoked", async () => {
  const lease = client.lease(30, { autoKeepAlive: false });
  const id = await lease.grant();
  const renewals = new EndpointRenewals(etcd.endpoints);
  try {
    expect(renewals.count).toBe(3);
    for (let node = 0; node < 3; node++) {
      const ttl = await renewals.renew(node, id, 5_000);
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(30);
    }
    await lease.revoke();
    expect(await renewals.renew(1, id, 5_000)).toBeLessThanOrEqual(0);
  } finally {
    renewals.close();
  }
}, 30_000);

it("a node that hangs fails the renewals sent through it within their deadline; the leader renews the lease meanwhile", async () => {
  const lease = client.lease(30, { autoKeepAlive: false });
  const id = await lease.grant();
  const renewals = new EndpointRenewals(etcd.endpoints);
  // A follower hangs: the other nodes keep their leader, so the renewal through another one
  // answers without waiting for an election (an etcd leader that dies: election_etcd_cluster_test.ts).
  const leader = etcd.nodes.indexOf(await etcd.raftLeader());
  const hungIndex = leader === 0 ? 1 : 0;
  const hung = etcd.nodes[hungIndex]!;
  hung.pause();
  try {
    const started = performance.now();
    await expect(renewals.renew(hungIndex, id, 500)).rejects.toThrow();
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(await renewals.renew(leader, id, 5_000)).toBeGreaterThan(0);
  } finally {
    hung.resume();
    renewals.close();
    await lease.revoke().catch(() => undefined);
  }
}, 30_000);
