/**
 * A broker in this process that stops and comes back as the same broker: the same port (the one
 * its first start bound, or a fixed one), folder, store and logger. The start/stop/restart logic
 * of tests/helpers/cluster.ts's `Node` and tests/helpers/peers.ts's `Peer`, which differ only in
 * the config they start with.
 */
import { join } from "node:path";
import type { Config } from "../../src/server/config/config.ts";
import { type Logger, memoryLogger } from "../../src/server/log.ts";
import { type BrokerServer, startBroker } from "../../src/server/server.ts";
import type { Broker } from "../../src/server/broker.ts";
import type { Store } from "../../src/server/store/store.ts";

export abstract class InProcessBroker {
  server: BrokerServer | null = null;
  /** One logger for every life of this broker: lines accumulate across restarts. */
  readonly logger: Logger & { lines: string[] } = memoryLogger();
  /** A store of our own (default: the one the config asks for). */
  makeStore?: () => Store;
  /** A clock of our own, in ms since the epoch (default: the wall clock). */
  now?: () => number;

  constructor(
    readonly name: string,
    /** The JWT audience clients name in its host string. */
    readonly serviceId: string,
    /** 0 until the first start binds a free one; kept for every start after. */
    public port: number,
    readonly dir: string,
    public overrides: Record<string, unknown>,
  ) {}

  /** The config of its next start. */
  abstract config(): Config;

  /** What every such broker's config holds: its folders, and no admin API. */
  protected folders(): Record<string, unknown> {
    return {
      isManagementInterface: false,
      registeredClientsPath: join(this.dir, "clients"),
      dataDirectory: join(this.dir, "data"),
    };
  }

  /** The client address of this broker: `127.0.0.1:<port>@<serviceId>`. */
  get host(): string {
    return `127.0.0.1:${this.port}@${this.serviceId}`;
  }

  start(): this {
    if (this.server) throw new Error(`${this.name} already runs`);
    this.server = startBroker(this.config(), { logger: this.logger, store: this.makeStore?.(), now: this.now });
    this.port = this.server.port;
    return this;
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = null;
    await server?.stop();
  }

  get broker(): Broker {
    if (!this.server) throw new Error(`${this.name} is not running`);
    return this.server.broker;
  }
}
