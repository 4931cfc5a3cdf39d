/**
 * `kitten-mq publish CHANNEL JSON`: sends one message through the admin API (POST /publish), as
 * the client "kitten-mq-admin": the channel's format and the rules apply as to any client.
 */
import type { CliArgs } from "../args.ts";
import { CliError, findAdmin } from "../api.ts";
import { json } from "../format.ts";

export async function run(args: CliArgs): Promise<number> {
  const [channel, text, ...extra] = args.positionals;
  if (channel === undefined || text === undefined) {
    throw new CliError("USAGE", `publish needs CHANNEL and JSON: kitten-mq publish orders/v1/42 '{"order": 42}'`);
  }
  if (extra.length > 0) {
    throw new CliError("USAGE", `publish takes one CHANNEL and one JSON body: quote the body ('{"a": 1}'); extra: ${JSON.stringify(extra.join(" "))}`);
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new CliError("USAGE", `cannot publish to "${channel}": the body is not JSON: ${(error as Error).message}`);
  }
  const admin = await findAdmin(args.config);
  const sent = await admin.request<{ messageId: string; channel: string }>("POST", "/publish", { channel, body });
  console.log(args.json ? json(sent) : `kitten-mq: published ${sent.messageId} to ${sent.channel}`);
  return 0;
}
