/**
 * `kitten-mq peek -q QUEUE [-i ID] [--limit N] [--offset N]`: a page of a queue's messages,
 * read without taking them (nothing is delivered, acked or removed).
 */
import type { CliArgs } from "../args.ts";
import { type Admin, CliError, findAdmin, queuePath } from "../api.ts";
import { json, table } from "../format.ts";

export interface Page {
  total: number;
  offset: number;
  messages: { messageId: string; destination: string; state: string; deliveries: number; created: number; size: number; preview: string }[];
}

export async function run(args: CliArgs): Promise<number> {
  if (args.queue === undefined) throw new CliError("USAGE", "peek needs -q QUEUE (endpoint/version)");
  const page = await fetchPage(await findAdmin(args.config), args.queue, args);
  console.log(args.json ? json(page) : formatPage(page, args.id));
  return 0;
}

/** One page of messages; with `-i`, counted and paged among that id's messages only. */
export async function fetchPage(admin: Admin, queue: string, args: CliArgs): Promise<Page> {
  const query = new URLSearchParams({ limit: args.limit ?? "50", offset: args.offset ?? "0" });
  if (args.id !== undefined) query.set("id", args.id);
  return await admin.request<Page>("GET", `${queuePath(queue)}/messages?${query}`);
}

export function formatPage(page: Page, id: string | undefined): string {
  const of = id === undefined ? `of ${page.total}` : `of ${page.total} for id ${id}`;
  const range = page.messages.length === 0 ? "" : `${page.offset + 1}-${page.offset + page.messages.length} `;
  const head = `messages ${range}${of}`;
  if (page.messages.length === 0) return head;
  return head + "\n" + table(
    ["message id", "id", "state", "deliveries", "created", "bytes", "body"],
    page.messages.map((m) => [m.messageId, m.destination, m.state, m.deliveries, new Date(m.created).toISOString(), m.size, m.preview]),
  );
}
