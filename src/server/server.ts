/**
 * A running broker: the core, its TCP listener and its timer, started and stopped together.
 */
import { Broker, type BrokerOptions } from "./broker.ts";
import type { Config } from "./config.ts";
import { listen } from "./tcp.ts";

/** How often queue timers (ack timeouts, delayed requeues, ttl) are checked. */
export const TICK_MS = 25;

export interface BrokerServer {
  readonly broker: Broker;
  /** The port actually bound (useful with `socketServer.port: 0`). */
  readonly port: number;
  readonly hostname: string;
  /** Stops accepting, closes every connection and the timers. */
  stop(): Promise<void>;
}

export function startBroker(config: Config, options: BrokerOptions = {}): BrokerServer {
  const broker = new Broker(config, options);
  const listener = listen(broker);
  let lastSample = broker.now();
  const timer = setInterval(() => {
    broker.tick();
    const now = broker.now();
    if (now - lastSample >= 1000) {
      broker.stats.sample(now);
      lastSample = now;
    }
  }, TICK_MS);
  broker.log.info("broker", `serviceId=${config.serviceId};listening=${listener.hostname}:${listener.port};` +
    `role=${config.isMaster ? "master" : "slave"};started`);
  let stopped: Promise<void> | null = null;
  return {
    broker,
    port: listener.port,
    hostname: listener.hostname,
    stop() {
      stopped ??= (async () => {
        clearInterval(timer);
        listener.stop(true);
        await broker.store?.close();
        broker.log.info("broker", "stopped");
      })();
      return stopped;
    },
  };
}
