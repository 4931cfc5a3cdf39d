/**
 * Brokers of one cluster, in this process, that know each other through `cluster.peers` (each
 * with its own serviceId, port, folder and key pair), for the replication and catch-up tests.
 * Starting, stopping and restarting one is tests/helpers/in_process_broker.ts's.
 */
import { join } from "node:path";
import { Client, type ClientOptions, type KittenError } from "../../mod.ts";
import { Cleanup, clientOptions, freePort } from "./broker.ts";
import { TempDirs } from "./temp_dir.ts";
import { InProcessBroker } from "./in_process_broker.ts";
import { type Config, parseConfig } from "../../src/server/config/config.ts";

/** What one test file starts: brokers, clients and folders, all gone at `teardown()`. */
export class Peers {
  readonly cleanup = new Cleanup();
  readonly temps = new TempDirs();
  readonly running: Peer[] = [];

  async teardown(): Promise<void> {
    await this.cleanup.run();
    for (const peer of this.running.splice(0)) await peer.stop().catch(() => {});
    this.temps.removeAll();
  }

  /** One broker, not started. */
  peer(name: string, port: number, dir: string, overrides: Record<string, unknown>): Peer {
    return new Peer(this.running, name, port, dir, overrides);
  }

  /** Brokers that list each other as peers; the first is master. */
  async cluster(count: number, overrides: Record<string, unknown> = {}): Promise<Peer[]> {
    const root = this.temps.make("kitten-replication-");
    const peers: Peer[] = [];
    for (let i = 0; i < count; i++) {
      peers.push(this.peer(`b${i}`, await freePort(), join(root, `b${i}`), { ...overrides, isMaster: i === 0 }));
    }
    for (const peer of peers) peer.peers = peers.filter((other) => other !== peer).map((other) => other.host);
    return peers;
  }

  async client(hosts: string[], options: Partial<ClientOptions> = {}): Promise<{ mq: Client; errors: KittenError[] }> {
    const mq = new Client();
    const errors: KittenError[] = [];
    mq.on("error", (error: KittenError) => errors.push(error));
    this.cleanup.add(mq);
    await mq.connect(clientOptions({ host: hosts[0]! }, { hosts, reconnectDelayMs: 10, maxReconnectDelayMs: 50, ...options }));
    return { mq, errors };
  }
}

/** One broker of a cluster: a fixed port and folder, so a restart is the same broker coming back. */
export class Peer extends InProcessBroker {
  peers: string[] = [];
  constructor(
    readonly running: Peer[],
    name: string,
    port: number,
    dir: string,
    overrides: Record<string, unknown>,
  ) {
    super(name, name, port, dir, overrides);
  }

  config(extra: Record<string, unknown> = {}): Config {
    const overrides = { ...this.overrides, ...extra };
    return parseConfig({
      serviceId: this.name,
      ...this.folders(),
      keysDirectory: join(this.dir, "keys"),
      durability: "fsync",
      prefetch: 1000,
      maxItemsInQueue: 1_000_000,
      ...overrides,
      cluster: { peers: this.peers, ...(overrides.cluster as object | undefined) },
      socketServer: { port: this.port, host: "127.0.0.1" },
    });
  }

  override start(): this {
    super.start();
    if (!this.running.includes(this)) this.running.push(this);
    return this;
  }

  /** Messages the broker holds for `queue`: in memory, and paged to its store beyond the memory budget. */
  live(queue: string): number {
    const held = this.broker.queues.get(queue);
    return held ? held.live + held.backlog.count : 0;
  }

  get upstreamState(): string | undefined {
    return this.broker.cluster.status().upstream?.state;
  }
}


export const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

export async function sendAll(mq: Client, channel: string, from: number, to: number): Promise<void> {
  const batch = 2_000;
  for (let start = from; start < to; start += batch) {
    await Promise.all(range(start, Math.min(to, start + batch)).map((n) => mq.send(channel, { n })));
  }
}
