/**
 * The cluster's gauges in GET /metrics: the epoch, the in-sync set, each replica's lag (entries,
 * seconds, bytes) and catch-up as the master sees it, snapshots sent, the log, and a slave's link
 * to its master. Registered once; read at each scrape.
 */
import type { Stats } from "../stats/stats.ts";
import type { Cluster } from "./cluster.ts";

export function registerClusterGauges(stats: Stats, cluster: Cluster): void {
  stats.addGauge({
    name: "kitten_mq_cluster_group_info",
    help: "The group this broker belongs to (cluster.group), as a label; always 1",
    read: () => [[{ group: cluster.host.config.cluster.group }, 1]],
  });
  stats.addGauge({
    name: "kitten_mq_cluster_epoch",
    help: "The broker's epoch: raised at each promotion or election, it fences old masters",
    read: () => [[{}, cluster.epoch]],
  });
  stats.addGauge({
    name: "kitten_mq_cluster_in_sync_brokers",
    help: "On the master: brokers in sync (the master included); a send is confirmed by all of them when minInSyncReplicas >= 2",
    read: () => (cluster.isMaster ? [[{}, cluster.replication.inSyncCount() + 1]] : []),
  });
  stats.addGauge({
    name: "kitten_mq_cluster_min_in_sync_replicas",
    help: "cluster.minInSyncReplicas: brokers that must hold a message before it is confirmed",
    read: () => [[{}, cluster.host.config.cluster.minInSyncReplicas]],
  });
  stats.addGauge({
    name: "kitten_mq_cluster_replica_in_sync",
    help: "On the master, per slave: 1 while it is in sync, 0 while it catches up or lags",
    read: () => cluster.replication.status().map((r) => [{ peer: r.peer }, r.state === "in-sync" ? 1 : 0]),
  });
  stats.addGauge({
    name: "kitten_mq_cluster_replica_lag_entries",
    help: "On the master, per slave: replication entries sent and not yet acknowledged as stored",
    read: () => cluster.replication.status().map((r) => [{ peer: r.peer }, r.lagEntries]),
  });
  stats.addGauge({
    name: "kitten_mq_cluster_replica_lag_seconds",
    help: "On the master, per slave: age of the oldest replication entry it has not acknowledged",
    read: () => cluster.replication.status().map((r) => [{ peer: r.peer }, r.lagMs / 1000]),
  });
  stats.addGauge({
    name: "kitten_mq_cluster_replica_lag_bytes",
    help: "On the master, per slave: bytes of replication entries sent and not yet acknowledged as stored",
    read: () => cluster.replication.status().map((r) => [{ peer: r.peer }, r.lagBytes]),
  });
  stats.addGauge({
    name: "kitten_mq_cluster_replica_catch_up_bytes",
    help: "On the master, per slave: bytes of its last catch-up; from=position (what it missed) or from=snapshot (all it holds)",
    read: () => cluster.replication.status().map((r) => [{ peer: r.peer, from: r.catchUp }, r.catchUpBytes]),
  });
  stats.addGauge({
    name: "kitten_mq_cluster_snapshots_sent_total",
    type: "counter",
    help: "Full snapshots sent to slaves whose position this master no longer held (the reason is logged)",
    read: () => [[{}, cluster.replication.snapshotsSent]],
  });
  stats.addGauge({
    name: "kitten_mq_cluster_position_catch_ups_total",
    type: "counter",
    help: "Slaves caught up from their position: sent only the entries they lacked",
    read: () => [[{}, cluster.replication.positionCatchUps]],
  });
  stats.addGauge({
    name: "kitten_mq_cluster_log_index",
    help: "The last index of the replication log this broker holds",
    read: () => [[{}, cluster.logIndex]],
  });
  stats.addGauge({
    name: "kitten_mq_cluster_log_retained_bytes",
    help: "Bytes of the newest replication entries kept in memory, from which slaves catch up",
    read: () => [[{}, cluster.positions.tail.bytes]],
  });
  stats.addGauge({
    name: "kitten_mq_cluster_upstream_in_sync",
    help: "On a slave with cluster.peers: 1 while it is in sync with its master, 0 otherwise",
    read: () => {
      const upstream = cluster.status().upstream;
      return upstream ? [[{ state: upstream.state }, upstream.state === "in-sync" ? 1 : 0]] : [];
    },
  });
  stats.addGauge({
    name: "kitten_mq_cluster_upstream_pending_entries",
    help: "On a slave with cluster.peers: replicated messages received and not yet stored",
    read: () => {
      const upstream = cluster.status().upstream;
      return upstream ? [[{}, upstream.pending]] : [];
    },
  });
}
