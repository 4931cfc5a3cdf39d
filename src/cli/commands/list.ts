/**
 * `kitten-mq list [-q QUEUE] [-i ID] [-m] [--limit N] [--offset N]`: every queue with its
 * depths and counters; with `-q`, one queue's ids, consumers and listeners; with `-m`, its
 * messages (a page, `--limit` 50 by default, as `peek`). `-i` keeps one destination id.
 */
import type { CliArgs } from "../args.ts";
import { type Admin, CliError, findAdmin, queuePath } from "../api.ts";
import { json, table } from "../format.ts";
import { fetchPage, formatPage } from "./peek.ts";

type Depth = { ready: number; inflight: number; delayed: number; waiting: number };
type Counters = Record<"received" | "delivered" | "acked" | "timeout" | "dropped" | "expired" | "dead", number>;
interface QueueSummary { name: string; depth: Depth; counters: Counters; consumers: number; listeners: number }
interface Handler { clientId: string | null; kind: string; ids: string[]; prefetch: number; inflight: number }
interface QueueDetail extends Omit<QueueSummary, "consumers" | "listeners"> {
  ids: (Depth & { id: string })[];
  consumers: Handler[];
  listeners: Handler[];
}

export async function run(args: CliArgs): Promise<number> {
  const admin = await findAdmin(args.config);
  if (args.queue === undefined) return await listQueues(admin, args);
  const path = queuePath(args.queue);
  const detail = await admin.request<QueueDetail>("GET", path);
  const keep = <T extends { id?: string; destination?: string }>(rows: T[]) =>
    args.id === undefined ? rows : rows.filter((row) => (row.id ?? row.destination) === args.id);
  const page = args.messages ? await fetchPage(admin, args.queue, args) : null;
  if (args.json) {
    console.log(json({ ...detail, ids: keep(detail.ids), ...(page ? { messages: page } : {}) }));
    return 0;
  }
  const d = detail.depth;
  console.log(`queue ${detail.name}: ready ${d.ready}, in flight ${d.inflight}, delayed ${d.delayed}, waiting ${d.waiting}\n`);
  const ids = keep(detail.ids);
  console.log(ids.length === 0 ? "no message in this queue" : table(
    ["id", "ready", "in flight", "delayed", "waiting"],
    ids.map((row) => [row.id, row.ready, row.inflight, row.delayed, row.waiting]),
  ));
  const handlers = [...detail.consumers, ...detail.listeners];
  console.log("\n" + (handlers.length === 0 ? "no consumer or listener" : table(
    ["client", "kind", "ids", "prefetch", "in flight"],
    handlers.map((h) => [h.clientId, h.kind === "consume" ? "consumer" : "listener", h.ids.join(","), h.prefetch, h.inflight]),
  )));
  if (page) console.log("\n" + formatPage(page, args.id));
  return 0;
}

async function listQueues(admin: Admin, args: CliArgs): Promise<number> {
  if (args.messages || args.id !== undefined) throw new CliError("USAGE", "-m and -i need -q QUEUE (endpoint/version)");
  const { queues } = await admin.request<{ queues: QueueSummary[] }>("GET", "/queues");
  if (args.json) {
    console.log(json({ queues }));
    return 0;
  }
  if (queues.length === 0) {
    console.log("no queue yet: queues appear when a client sends, listens or consumes");
    return 0;
  }
  console.log(table(
    ["queue", "ready", "in flight", "delayed", "waiting", "received", "delivered", "acked", "dropped", "dead", "consumers", "listeners"],
    queues.map((q) => [
      q.name, q.depth.ready, q.depth.inflight, q.depth.delayed, q.depth.waiting, q.counters.received,
      q.counters.delivered, q.counters.acked, q.counters.dropped + q.counters.expired, q.counters.dead, q.consumers, q.listeners,
    ]),
  ));
  return 0;
}
