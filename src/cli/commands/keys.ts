/**
 * `kitten-mq keys list` and `kitten-mq keys revoke CLIENT_ID`: pinned client keys. Revoking
 * un-pins the key (rotation): the client's next connection pins the key it then presents.
 */
import type { CliArgs } from "../args.ts";
import { CliError, findAdmin } from "../api.ts";
import { json, table } from "../format.ts";

export async function run(args: CliArgs): Promise<number> {
  const [action, clientId] = args.positionals;
  if (action === "list") {
    const admin = await findAdmin(args.config);
    const { pinned } = await admin.request<{ pinned: { clientId: string; connected: boolean }[] }>("GET", "/clients");
    if (args.json) console.log(json({ pinned }));
    else if (pinned.length === 0) console.log("no pinned key");
    else console.log(table(["client id", "connected"], pinned.map((p) => [p.clientId, p.connected ? "yes" : "no"])));
    return 0;
  }
  if (action === "revoke" && clientId !== undefined) {
    const admin = await findAdmin(args.config);
    const result = await admin.request("DELETE", `/clients/${encodeURIComponent(clientId)}/key`);
    console.log(args.json ? json(result) : `kitten-mq: key of "${clientId}" un-pinned; its next connection pins a new one`);
    return 0;
  }
  throw new CliError("USAGE", `usage: kitten-mq keys list | kitten-mq keys revoke CLIENT_ID`);
}
