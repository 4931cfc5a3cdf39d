/**
 * `kitten-mq start [--config FILE]`: runs the broker in the foreground, with its admin API and
 * dashboard unless `isManagementInterface` is false. Without a file it runs on the embedded
 * defaults (127.0.0.1:1234, admin on 127.0.0.1:8080).
 *
 * Prints `kitten-mq listening on HOST:PORT`, then `kitten-mq admin on URL`: the bound ports
 * (port 0 → a free port), which tests and scripts read. The admin URL is also written to
 * `<dataDirectory>/admin.json` for the other commands (see state.ts).
 *
 * Signals: SIGUSR2 reloads the file; SIGUSR1 soft-stops (refuse new connections and sends, let
 * in-flight deliveries finish, up to 30 s); SIGTERM and SIGINT do the same with a 5 s bound.
 * POST /soft-stop and /stop on the admin API do what SIGUSR1 and SIGTERM do.
 */
import { type AdminServer, SOFT_STOP_GRACE_MS, startAdmin, STOP_GRACE_MS } from "../../admin/mod.ts";
import { type Config, defaultConfig, loadConfigFile, startBroker } from "../../server/mod.ts";
import type { CliArgs } from "../args.ts";
import { connectHost, removeState, writeState } from "../state.ts";

export { SOFT_STOP_GRACE_MS };
export const TERM_GRACE_MS = STOP_GRACE_MS;

export async function run(args: Pick<CliArgs, "config">): Promise<number> {
  const configPath = args.config;
  const config: Config = configPath ? await loadConfigFile(configPath) : defaultConfig();
  const server = startBroker(config, { configPath: configPath ?? null });
  const log = server.broker.log;
  if (!configPath) log.info("broker", "no --config given: running on the embedded default config");

  let exit!: (code: number) => void;
  const exited = new Promise<number>((resolve) => (exit = resolve));
  let admin: AdminServer | null = null;
  let stopping = false;
  const stop = (reason: string, graceMs: number) => {
    if (stopping) return;
    stopping = true;
    log.info("broker", `${reason};stopping`);
    server.softStop(graceMs).then(() => 0, () => 1).then(async (code) => {
      // Requests under way (the reply to POST /stop itself) get a moment, then the rest is cut.
      if (admin) await Promise.race([admin.stop(), new Promise((r) => setTimeout(r, 1000))]).then(() => admin!.stop(true));
      await removeState(config).catch(() => {});
      exit(code);
    });
  };

  // Before anything is printed: a script that signals as soon as it reads a line must not hit
  // the default action of SIGUSR1/SIGUSR2 (terminate).
  process.on("SIGUSR2", () => {
    server.reload().catch(() => {}); // a refusal is logged by reload() with every problem
  });
  process.once("SIGUSR1", () => stop("SIGUSR1 received", SOFT_STOP_GRACE_MS));
  process.once("SIGTERM", () => stop("SIGTERM received", TERM_GRACE_MS));
  process.once("SIGINT", () => stop("SIGINT received", TERM_GRACE_MS));

  // The exact line tests and scripts wait for; it names the port actually bound (port 0 → free port).
  console.log(`kitten-mq listening on ${server.hostname}:${server.port}`);
  if (config.isManagementInterface) {
    try {
      admin = startAdmin(server, config, { stop: (graceMs, reason) => stop(reason, graceMs) });
    } catch (error) {
      await server.stop();
      throw error;
    }
    // The bound host may be a wildcard (0.0.0.0): the CLI connects to this machine instead.
    const adminUrl = `${admin.url.startsWith("https:") ? "https" : "http"}://${connectHost(admin.hostname)}:${admin.port}`;
    await writeState(config, {
      pid: process.pid,
      adminUrl,
      broker: `${server.hostname}:${server.port}`,
      configPath: configPath ?? null,
      startedAt: new Date().toISOString(),
    }).catch((error) => log.warn("broker", `cannot write the state file (the CLI finds the admin API from the config only): ${error}`));
    // After the state file: whoever reads this line can run the other commands at once.
    console.log(`kitten-mq admin on ${admin.url}`);
  }

  return await exited;
}
