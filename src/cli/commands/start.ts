/**
 * `kitten-mq start [--config FILE]`: runs the broker in the foreground until SIGTERM or SIGINT.
 * Without a file it runs on the embedded defaults (127.0.0.1:1234). SIGUSR2 reloads the file.
 */
import { KittenError } from "../../protocol/errors.ts";
import { type Config, defaultConfig, loadConfigFile } from "../../server/config.ts";
import { startBroker } from "../../server/server.ts";

export async function run(configPath: string | undefined): Promise<number> {
  const config: Config = configPath ? await loadConfigFile(configPath) : defaultConfig();
  const server = startBroker(config);
  const log = server.broker.log;
  if (!configPath) log.info("broker", "no --config given: running on the embedded default config");
  // The exact line tests and scripts wait for; it names the port actually bound (port 0 → free port).
  console.log(`kitten-mq listening on ${server.hostname}:${server.port}`);

  if (configPath) {
    process.on("SIGUSR2", async () => {
      try {
        server.broker.reload(await loadConfigFile(configPath));
      } catch (error) {
        const message = error instanceof KittenError ? error.message : String(error);
        log.error("broker", `reload refused, running config unchanged: ${message}`);
      }
    });
  }

  return await new Promise<number>((resolve) => {
    const stop = (signal: string) => {
      log.info("broker", `${signal} received;stopping`);
      server.stop().then(() => resolve(0), () => resolve(1));
    };
    process.once("SIGTERM", () => stop("SIGTERM"));
    process.once("SIGINT", () => stop("SIGINT"));
  });
}
