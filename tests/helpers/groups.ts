/**
 * Groups of brokers on one etcd, in this process: one broker per group, each the master of its
 * group, all sharing a prefix of their own (queues spread over groups, moves between them).
 */
import { startTestBroker, type TestBroker, waitFor } from "./broker.ts";
import { testPrefix } from "./election.ts";
import type { EtcdCluster } from "./etcd.ts";

/**
 * Starts a broker per name of `names` (serviceId `<group>-1`), `extra` config keys going to each,
 * and resolves once each is its group's master and sees every group's broker in the map.
 */
export async function startGroups(etcd: EtcdCluster, names: string[], extra: Record<string, unknown> = {}): Promise<TestBroker[]> {
  const prefix = testPrefix();
  const started = names.map((group) =>
    startTestBroker({
      serviceId: `${group}-1`,
      ...extra,
      cluster: { peers: [], minInSyncReplicas: 1, group, etcd: { endpoints: etcd.endpoints, leaseTtlSeconds: 2, prefix } },
    })
  );
  await waitFor(() => started.every((b) => b.broker.isMaster), 10_000, "every group elects its master");
  // Each broker sees every group's member key (a group named only by a placed queue has none).
  await waitFor(
    () => started.every((b) => names.every((group) => (b.broker.placement.status()!.groups[group]?.brokers.length ?? 0) > 0)),
    10_000,
    "every group's broker seen",
  );
  return started;
}
