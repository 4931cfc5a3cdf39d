/**
 * `kitten-mq groups [-q QUEUE] [--json]`: the queue map as the broker sees it (GET /groups):
 * every group with its brokers and queues, the map epoch, and the broker's own group. With
 * `-q`, the group that owns one queue. A broker without cluster.etcd has no map: it says so.
 */
import type { CliArgs } from "../args.ts";
import { CliError, findAdmin } from "../api.ts";
import { json } from "../format.ts";
import { queueProblem } from "../../protocol/channel.ts";

interface GroupsView {
  enabled: boolean;
  epoch: number;
  group: string;
  groups: Record<string, { brokers: string[]; queues: string[]; queueCount: number }>;
}

/** Queue names per line, after the indent: long maps stay readable in a 100-column terminal. */
const WIDTH = 100;

export async function run(args: CliArgs): Promise<number> {
  if (args.queue !== undefined) {
    const problem = queueProblem(args.queue);
    if (problem !== null) throw new CliError("USAGE", `Cannot use -q ${JSON.stringify(args.queue)}: ${problem}`);
  }
  const admin = await findAdmin(args.config);
  const view = await admin.request<GroupsView>("GET", "/groups");
  if (args.queue !== undefined) return owner(view, args.queue, args.json);
  if (args.json) {
    console.log(json(view));
    return 0;
  }
  if (!view.enabled) {
    console.log(`no queue map: this broker has no cluster.etcd, so queues are not spread over groups; it serves every queue itself (group ${view.group})`);
    return 0;
  }
  const names = Object.keys(view.groups);
  const lines = [`map epoch ${view.epoch}    this broker: group ${view.group}    ${names.length} ${plural(names.length, "group")}`];
  if (names.length === 0) lines.push("", "no group seen yet: the broker has not read the map from etcd (see its log)");
  for (const name of names) {
    const g = view.groups[name]!;
    const mine = name === view.group ? " (this broker's group)" : "";
    lines.push("", `group ${name}${mine}: ${g.brokers.length} ${plural(g.brokers.length, "broker")}, ${g.queueCount} ${plural(g.queueCount, "queue")}`);
    const brokers = g.brokers.length === 0 ? ["none alive"] : g.brokers;
    lines.push(...brokers.map((broker, i) => `  ${i === 0 ? "brokers" : "       "}  ${broker}`));
    lines.push(...wrap(g.queues, "  queues   "));
  }
  console.log(lines.join("\n"));
  return 0;
}

/** `-q QUEUE`: the group that owns it and that group's brokers; NOT_FOUND when it is not placed yet. */
function owner(view: GroupsView, queue: string, asJson: boolean): number {
  if (!view.enabled) {
    const answer = { queue, group: view.group, brokers: [] as string[], enabled: false };
    console.log(asJson ? json(answer) : `${queue}: no queue map (no cluster.etcd); this broker serves it (group ${view.group})`);
    return 0;
  }
  const found = Object.entries(view.groups).find(([, g]) => g.queues.includes(queue));
  if (!found) {
    throw new CliError("NOT_FOUND", `queue "${queue}" is on no group yet: a queue is placed when a client first uses it (map epoch ${view.epoch})`);
  }
  const [group, { brokers }] = found;
  const line = `${queue}: group ${group}  brokers ${brokers.join(", ") || "none alive"}  (map epoch ${view.epoch})`;
  console.log(asJson ? json({ queue, group, brokers, epoch: view.epoch, enabled: true }) : line);
  return 0;
}

function wrap(queues: string[], first: string): string[] {
  if (queues.length === 0) return [`${first}none`];
  const indent = " ".repeat(first.length);
  const lines: string[] = [];
  let line = first;
  for (const queue of queues) {
    if (line.length > first.length && line.length + queue.length + 2 > WIDTH) {
      lines.push(line.trimEnd());
      line = indent;
    }
    line += `${queue}  `;
  }
  lines.push(line.trimEnd());
  return lines;
}

function plural(n: number, word: string): string {
  return n === 1 ? word : `${word}s`;
}
