/**
 * `kitten-mq reload [--config FILE]`: the broker re-reads its config file. The whole file is
 * validated first; a bad file changes nothing and every problem is printed. A promotion
 * (`isMaster: true`) of a slave that is not in sync is refused unless `--force` is given. (SIGUSR2 does the
 * same without the admin API, for systemd's ExecReload.)
 */
import { type CliArgs } from "../args.ts";
import { findAdmin } from "../api.ts";
import { json } from "../format.ts";

export async function run(args: CliArgs): Promise<number> {
  const admin = await findAdmin(args.config);
  // --force promotes a slave that is not in sync with its master: it may lose messages.
  const result = await admin.request<{ configPath: string }>("POST", args.force ? "/reload?force=true" : "/reload");
  console.log(args.json ? json(result) : `kitten-mq: config reloaded from ${result.configPath}`);
  return 0;
}
