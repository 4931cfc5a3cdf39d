/**
 * A running broker: the core, its TCP listener and its timer, started and stopped together.
 */
import { KittenError } from "../protocol/errors.ts";
import { Broker, type BrokerOptions } from "./broker.ts";
import { type Config, durableKey, loadConfigFile, securityWarnings } from "./config/config.ts";
import { checkReloadable } from "./config/restart_keys.ts";
import { listen } from "./tcp.ts";
import { Reclaimer, reclaimMemory } from "./reclaim.ts";
import { Logger } from "./log.ts";
import { DELIVERY_COUNT_DELAY_MS, SqliteStore } from "./store/sqlite_store.ts";
import { STORE_FILE } from "./store/record.ts";
import type { Store } from "./store/store.ts";
import { existsSync } from "node:fs";
import { join } from "node:path";

/**
 * The durable store, when anything needs one: the broker or a channel is durable, or a store
 * left by an earlier run holds messages (switching to memory must not silently drop them).
 */
function openStore(config: Config, logger: Logger, onCommit: (elapsedMs: number) => void): Store | null {
  if (durableKey(config) === null && !existsSync(join(config.dataDirectory, STORE_FILE))) return null;
  return new SqliteStore({
    directory: config.dataDirectory,
    mode: config.durability === "batch" ? "batch" : "fsync",
    commitIntervalMs: config.commitIntervalMs,
    deliveryCountDelayMs: DELIVERY_COUNT_DELAY_MS,
    logger,
    onCommit,
    // Only a broker in a cluster asks its store for messages by id (a slave's checks).
    indexById: config.cluster.peers.length > 0 || config.cluster.etcd !== null,
  });
}

/** The reason an operator can act on, from Bun's "Failed to listen at HOST" and its errno code. */
function whyNotListening(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  if (code === "EADDRINUSE") return "the port is in use (another process listens there)";
  if (code === "EADDRNOTAVAIL") return "the address is not one of this machine's";
  if (code === "EACCES") return "permission denied (ports below 1024 need privileges)";
  return `${typeof code === "string" ? `${code}: ` : ""}${(error as Error)?.message ?? String(error)}`;
}

/** Once a second: the rate window and the history (GET /history). */
export function sampleStats(broker: Broker, now: number): void {
  broker.stats.sample(now);
  broker.stats.history.record(now, { counters: broker.stats.counters, connections: broker.sessions.size, queues: broker.queues.values() });
}

/** How often queue timers (ack timeouts, delayed requeues, ttl) are checked. */
export const TICK_MS = 25;

export interface BrokerServer {
  readonly broker: Broker;
  /** The port actually bound (useful with `socketServer.port: 0`). */
  readonly port: number;
  readonly hostname: string;
  /** The config file the broker was started with (null: embedded defaults). */
  readonly configPath: string | null;
  /**
   * Re-reads the config file and applies it. The whole file is validated first: a bad file
   * throws CONFIG_INVALID listing every problem, and the running config stays.
   */
  reload(options?: { force?: boolean }): Promise<Config>;
  /**
   * Refuses new connections and sends, lets in-flight deliveries finish for at most `graceMs`,
   * then stops. Resolves when stopped.
   */
  softStop(graceMs: number): Promise<void>;
  /** Stops accepting, closes every connection and the timers. */
  stop(): Promise<void>;
}

export interface StartOptions extends BrokerOptions {
  configPath?: string | null;
}

export function startBroker(config: Config, options: StartOptions = {}): BrokerServer {
  const logger = options.logger ?? new Logger(config.logLevel);
  // The store is opened before the broker whose statistics time its commits.
  let timed: Broker | null = null;
  const onCommit = (elapsedMs: number) => timed?.stats.commit.observe(elapsedMs / 1000);
  const store = options.store !== undefined ? options.store : openStore(config, logger, onCommit);
  const broker = new Broker(config, { ...options, logger, store });
  timed = broker;
  // Recovery runs before the port opens: no client sees the broker half-loaded.
  broker.recover();
  let listener: ReturnType<typeof listen>;
  try {
    listener = listen(broker);
  } catch (error) {
    store?.close(); // its lock would keep a retry in this process from opening it
    const { host, port } = config.socketServer;
    throw new KittenError(
      "CONFIG_INVALID",
      `Cannot listen for clients on ${host}:${port} (socketServer.host, socketServer.port): ${whyNotListening(error)}`,
      undefined,
      { cause: error },
    );
  }
  broker.cluster.start();
  broker.placement.start(listener.port);
  let lastSample = broker.now();
  const reclaimer = new Reclaimer(broker.stats.counters, () => reclaimMemory(broker));
  let lastTick = performance.now();
  const timer = setInterval(() => {
    // A throw in a timer ends a Bun process: the tick runs the same engine code as a socket read,
    // so it gets the same guard (tcp.ts): logged, and the next tick runs.
    try {
      // The timer's own delay is the event loop's lag: real time, whatever clock the broker uses.
      const tickAt = performance.now();
      broker.stats.noteTimerDelay(tickAt - lastTick - TICK_MS);
      lastTick = tickAt;
      broker.tick();
      const now = broker.now();
      broker.moves.traffic.sample(now);
      if (now - lastSample >= 1000) {
        sampleStats(broker, now);
        broker.cluster.checkEligibility();
        broker.placement.tick(now);
        broker.moves.tick(now);
        lastSample = now;
        reclaimer.check();
      }
    } catch (error) {
      broker.log.failure("broker", "tick failed", error);
    }
  }, TICK_MS);
  broker.log.info("broker", `serviceId=${config.serviceId};listening=${listener.hostname}:${listener.port};` +
    `role=${config.isMaster ? "master" : "slave"};started`);
  for (const warning of securityWarnings(config)) broker.log.warn("security", warning);
  let stopped: Promise<void> | null = null;
  const configPath = options.configPath ?? null;
  return {
    broker,
    port: listener.port,
    hostname: listener.hostname,
    configPath,
    async reload(options = {}) {
      if (configPath === null) {
        throw new KittenError("CONFIG_INVALID", "Cannot reload: the broker runs on the embedded defaults, with no config file");
      }
      try {
        const next = await loadConfigFile(configPath);
        checkReloadable(broker.config, next, configPath);
        broker.reload(next, options);
        for (const warning of securityWarnings(next)) broker.log.warn("security", warning);
        return next;
      } catch (error) {
        // However it was asked for (admin API, signal), the operator finds the refusal in the log.
        const message = error instanceof KittenError ? error.message : String(error);
        broker.log.error("broker", `reload refused, running config unchanged: ${message}`);
        throw error;
      }
    },
    async softStop(graceMs) {
      if (!broker.stopping) {
        broker.stopAccepting();
        broker.log.info("broker", `soft stop: new connections and sends refused;waiting up to ${graceMs} ms for in-flight deliveries`);
        await broker.cluster.resign().catch((error) => broker.log.warn("cluster", `cannot resign: ${error.message}`));
      }
      const deadline = broker.now() + graceMs;
      while (broker.inflight() > 0 && broker.now() < deadline) await new Promise((r) => setTimeout(r, TICK_MS));
      const left = broker.inflight();
      if (left > 0) broker.log.warn("broker", `soft stop: ${left} deliveries still unacked after ${graceMs} ms`);
      await this.stop();
    },
    stop() {
      stopped ??= (async () => {
        clearInterval(timer);
        // Connections closing now are the broker's doing, not failed deliveries: their in-flight
        // copies stay stored as they are (redelivered after a restart), uncounted.
        broker.beginShutdown();
        listener.stop(true);
        await broker.moves.stop("the source broker stopped");
        await broker.placement.stop();
        await broker.cluster.stop();
        await broker.store?.close();
        broker.log.info("broker", "stopped");
      })();
      return stopped;
    },
  };
}
