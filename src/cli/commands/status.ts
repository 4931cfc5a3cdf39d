/** `kitten-mq status`: role, uptime, connections, depths and real rates of the running broker. */
import type { CliArgs } from "../args.ts";
import { findAdmin } from "../api.ts";
import { count, duration, json, perSecond } from "../format.ts";
import type { ClusterStatus } from "../../server/mod.ts";

interface Status {
  version: string;
  serviceId: string;
  role: string;
  stopping: boolean;
  uptimeSeconds: number;
  configPath: string | null;
  broker: { host: string; port: number };
  connections: number;
  queues: number;
  messages: { ready: number; inflight: number; delayed: number; waiting: number };
  counters: { sent: number; received: number; acked: number };
  rates: { sent: number; received: number; acked: number };
  cluster: ClusterStatus;
}

/** One line per replica (on a master) or the link to the master (on a slave). */
function clusterLines(cluster: ClusterStatus): string[] {
  if (cluster.mode === "single") return [];
  const lines = [
    `cluster   ${cluster.mode}${cluster.mode === "etcd" ? `  group ${cluster.group}` : ""}  epoch ${cluster.epoch}  minInSyncReplicas ${cluster.minInSyncReplicas}` +
    (cluster.role === "master" ? `  in sync: ${cluster.inSync.join(", ")}` : "") +
    (cluster.fencedBy ? `  FENCED by ${cluster.fencedBy.master} (epoch ${cluster.fencedBy.epoch})` : ""),
  ];
  if (cluster.log) {
    lines.push(
      `  log index ${count(cluster.log.index)}  kept from ${count(cluster.log.retainedFrom)} (${count(cluster.log.retainedBytes)} bytes)` +
        (cluster.role === "master" ? `  catch-ups from a position ${count(cluster.log.positionCatchUps)}, snapshots ${count(cluster.log.snapshotsSent)}` : ""),
    );
  }
  for (const r of cluster.replicas) {
    const snapshot = r.snapshotLeft > 0 ? `  snapshot left ${count(r.snapshotLeft)}` : "";
    const caughtUp = r.catchUp === undefined ? "" : `  caught up from ${r.catchUp} (${count(r.catchUpBytes)} bytes)`;
    const bytes = r.lagBytes === undefined ? "" : ` / ${count(r.lagBytes)} bytes`;
    lines.push(`  replica ${r.peer}  ${r.state}  lag ${count(r.lagEntries)} entries${bytes} / ${r.lagMs} ms${snapshot}${caughtUp}`);
  }
  const up = cluster.upstream;
  if (up) {
    const snapshot = up.state === "catching-up" ? `  snapshot ${count(up.snapshotReceived)} of ${up.snapshotTotal ?? "?"}` : "";
    lines.push(`  master ${up.master ?? "(not reached)"}  ${up.state}${snapshot}  not stored yet ${count(up.pending)}`);
  }
  return lines;
}

export async function run(args: CliArgs): Promise<number> {
  const admin = await findAdmin(args.config);
  const s = await admin.request<Status>("GET", "/status");
  if (args.json) {
    console.log(json(s));
    return 0;
  }
  const { messages: m, counters: c, rates: r } = s;
  console.log([
    `kitten-mq ${s.version}  ${s.serviceId}  ${s.stopping ? "STOPPING" : s.role}  up ${duration(s.uptimeSeconds)}`,
    `broker    ${s.broker.host}:${s.broker.port}    admin ${admin.url}    config ${s.configPath ?? "(embedded defaults)"}`,
    `clients   ${count(s.connections)} connected    queues ${count(s.queues)}`,
    `messages  ready ${count(m.ready)}  in flight ${count(m.inflight)}  delayed ${count(m.delayed)}  waiting ${count(m.waiting)}`,
    `received  ${perSecond(r.received)}  (${count(c.received)} total)`,
    `sent      ${perSecond(r.sent)}  (${count(c.sent)} total)`,
    `acked     ${perSecond(r.acked)}  (${count(c.acked)} total)`,
    ...clusterLines(s.cluster),
  ].join("\n"));
  return 0;
}
