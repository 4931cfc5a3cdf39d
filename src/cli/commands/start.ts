/**
 * `kitten-mq start [--config FILE]`: runs the broker in the foreground.
 * Without a file it runs on the embedded defaults (127.0.0.1:1234).
 *
 * Signals: SIGUSR2 reloads the file; SIGUSR1 soft-stops (refuse new connections and sends, let
 * in-flight deliveries finish, up to 30 s); SIGTERM and SIGINT do the same with a 5 s bound.
 */
import { KittenError } from "../../protocol/errors.ts";
import { type Config, defaultConfig, loadConfigFile } from "../../server/config.ts";
import { startBroker } from "../../server/server.ts";

export const SOFT_STOP_GRACE_MS = 30_000;
export const TERM_GRACE_MS = 5_000;

export async function run(configPath: string | undefined): Promise<number> {
  const config: Config = configPath ? await loadConfigFile(configPath) : defaultConfig();
  const server = startBroker(config, { configPath: configPath ?? null });
  const log = server.broker.log;
  if (!configPath) log.info("broker", "no --config given: running on the embedded default config");
  // The exact line tests and scripts wait for; it names the port actually bound (port 0 → free port).
  console.log(`kitten-mq listening on ${server.hostname}:${server.port}`);

  process.on("SIGUSR2", () => {
    server.reload().catch((error) => {
      const message = error instanceof KittenError ? error.message : String(error);
      log.error("broker", `reload refused, running config unchanged: ${message}`);
    });
  });

  return await new Promise<number>((resolve) => {
    const stop = (signal: string, graceMs: number) => {
      log.info("broker", `${signal} received;stopping`);
      server.softStop(graceMs).then(() => resolve(0), () => resolve(1));
    };
    process.once("SIGUSR1", () => stop("SIGUSR1", SOFT_STOP_GRACE_MS));
    process.once("SIGTERM", () => stop("SIGTERM", TERM_GRACE_MS));
    process.once("SIGINT", () => stop("SIGINT", TERM_GRACE_MS));
  });
}
