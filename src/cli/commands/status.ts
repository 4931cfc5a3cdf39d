/** `kitten-mq status`: role, uptime, connections, depths and real rates of the running broker. */
import type { CliArgs } from "../args.ts";
import { findAdmin } from "../api.ts";
import { count, duration, json, perSecond } from "../format.ts";

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
  ].join("\n"));
  return 0;
}
