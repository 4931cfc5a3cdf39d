/**
 * A deployment of broker processes for queue-move tests: real etcd, groups of two brokers each
 * (master and slave, `minInSyncReplicas` 2), every broker a child process that can be killed with
 * SIGKILL. Moves are asked for as any broker does, by writing the move record in etcd.
 */
import { afterAll, afterEach, beforeAll } from "bun:test";
import { join } from "node:path";
import { Etcd3, type Namespace } from "etcd3";
import { createMove, type MoveRecord, newMove, parseMoveRecord } from "../../src/server/cluster/move_records.ts";
import { freePort, waitFor } from "./broker.ts";
import { Client, type KittenError } from "../../mod.ts";
import { type ChildBroker, harnessClientOptions, kill9, spawnBroker, writeBrokerConfig } from "./crash.ts";
import { testPrefix } from "./election.ts";
import { type EtcdCluster, startEtcd } from "./etcd.ts";
import { type Relay, startRelay } from "./relay.ts";
import { TempDirs } from "./temp_dir.ts";

export interface MoveBroker {
  name: string;
  group: string;
  port: number;
  /** `127.0.0.1:<port>@<name>`. */
  host: string;
  configPath: string;
  child: ChildBroker | null;
  /** In front of the broker when its group is relayed: the address the queue map gives (`cluster.advertise`). */
  relay: Relay | null;
}

export class MoveDeployment {
  readonly brokers: MoveBroker[] = [];
  readonly prefix = testPrefix();
  readonly #client: Etcd3;
  readonly keys: Namespace;
  readonly #temps = new TempDirs();

  constructor(readonly etcd: EtcdCluster) {
    this.#client = new Etcd3({ hosts: etcd.endpoints });
    this.keys = this.#client.namespace(this.prefix);
  }

  /**
   * Starts `perGroup` brokers in each group; `extra` config keys go to every broker (`cluster` keys merged into the cluster section). The brokers of
   * `relayed` groups are reached through a relay by whoever learns their address from the queue
   * map (clients, a move's source); their peers and the seed hosts dial them directly.
   */
  async start(groups: string[], perGroup: number, extra: Record<string, unknown> = {}, relayed: string[] = []): Promise<void> {
    const { cluster: extraCluster, ...extraKeys } = extra as { cluster?: Record<string, unknown> };
    const root = this.#temps.make("kitten-move-");
    for (const group of groups) {
      for (let i = 1; i <= perGroup; i++) {
        const name = `${group}-${i}`;
        const port = await freePort();
        const relay = relayed.includes(group) ? await startRelay(port) : null;
        this.brokers.push({ name, group, port, host: `127.0.0.1:${port}@${name}`, configPath: "", child: null, relay });
      }
    }
    for (const broker of this.brokers) {
      const dir = join(root, broker.name);
      const peers = this.brokers.filter((other) => other.group === broker.group && other !== broker).map((other) => other.host);
      broker.configPath = writeBrokerConfig(dir, {
        serviceId: broker.name,
        keysDirectory: join(dir, "keys"),
        logLevel: 2,
        prefetch: 1000,
        ...extraKeys,
        socketServer: { port: broker.port, host: "127.0.0.1" },
        cluster: {
          advertise: broker.relay ? `127.0.0.1:${broker.relay.port}` : null,
          peers,
          minInSyncReplicas: peers.length > 0 ? 2 : 1,
          group: broker.group,
          etcd: { endpoints: this.etcd.endpoints, leaseTtlSeconds: 2, prefix: this.prefix },
          ...extraCluster,
        },
      });
    }
    await Promise.all(this.brokers.map(async (broker) => (broker.child = await spawnBroker(broker.configPath, 20_000))));
    for (const group of groups) await waitFor(async () => (await this.leader(group)) !== null, 20_000, `group ${group} elects a master`);
  }

  /** Every broker, as client hosts (any of them is a seed). */
  hosts(): string[] {
    return this.brokers.map((broker) => broker.host);
  }

  /** The master of `group` as etcd names it, with its epoch. */
  async leader(group: string): Promise<{ broker: MoveBroker; epoch: number } | null> {
    const answer = await this.keys.get(`groups/${group}/leader`).exec();
    const kv = answer.kvs[0];
    if (!kv) return null;
    const broker = this.brokers.find((candidate) => candidate.name === kv.value.toString());
    return broker ? { broker, epoch: Number(kv.create_revision) } : null;
  }

  /** The group owning `queue` in the map. */
  async owner(queue: string): Promise<string | null> {
    const value = await this.keys.get(`queues/${queue}`).string();
    return value ? (JSON.parse(value) as { group: string }).group : null;
  }

  async record(queue: string): Promise<MoveRecord | null> {
    const answer = await this.keys.get(`moves/${queue}`).exec();
    const kv = answer.kvs[0];
    return kv ? parseMoveRecord(kv.value.toString(), Number(kv.mod_revision)) : null;
  }

  /** Asks for a move as a broker does (move_records.ts createMove), on behalf of `requestedBy`. */
  async requestMove(queue: string, to: string, requestedBy = "test"): Promise<MoveRecord> {
    const map = (await this.keys.get(`queues/${queue}`).exec()).kvs[0];
    if (!map) throw new Error(`queue ${queue} is not placed`);
    const from = (JSON.parse(map.value.toString()) as { group: string }).group;
    const leader = await this.leader(from);
    if (!leader) throw new Error(`group ${from} has no master`);
    const last = await this.record(queue);
    const record = newMove(queue, from, to, leader.epoch, requestedBy, Date.now());
    const created = await createMove(this.keys, record, Number(map.mod_revision), last?.revision ?? 0);
    if (!created) throw new Error(`the move of ${queue} could not be recorded`);
    return created;
  }

  /**
   * Waits for the move record of `queue` to satisfy `predicate`, reading it from etcd every
   * `pollMs` (a measurement polls slowly: the reads cost CPU on the cores it measures).
   */
  async waitForRecord(queue: string, predicate: (record: MoveRecord) => boolean, timeoutMs: number, what: string, pollMs = 5): Promise<MoveRecord> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = await this.record(queue);
      if (found !== null && predicate(found)) return found;
      if (Date.now() > deadline) throw new Error(`waitForRecord timed out after ${timeoutMs} ms: ${what}`);
      await Bun.sleep(pollMs);
    }
  }

  async kill(broker: MoveBroker): Promise<void> {
    if (broker.child && broker.child.proc.exitCode === null) await kill9(broker.child);
  }

  /** Starts a killed broker again, on its port and data: it rejoins its group as a slave. */
  async restart(broker: MoveBroker): Promise<void> {
    broker.child = await spawnBroker(broker.configPath, 20_000);
  }

  async cleanup(): Promise<void> {
    for (const broker of this.brokers) await this.kill(broker);
    for (const broker of this.brokers) await broker.relay?.close();
    this.#client.close();
    this.#temps.removeAll();
  }
}

/**
 * What a file of move tests shares: one etcd for the file, the deployment each test starts
 * (`deploy()`) and its clients (`client()`: killed brokers are expected, so errors are not
 * reported), all stopped after each test.
 */
export function moveSuite(): { deploy(): MoveDeployment; client(hosts: string[], name: string): Promise<Client> } {
  let etcd: EtcdCluster | undefined;
  let deployment: MoveDeployment | null = null;
  const clients: Client[] = [];
  beforeAll(async () => {
    etcd = await startEtcd();
  });
  afterEach(async () => {
    for (const mq of clients.splice(0)) await mq.disconnect();
    await deployment?.cleanup();
    deployment = null;
  });
  afterAll(async () => {
    await etcd?.cleanup();
  });
  return {
    deploy: () => (deployment = new MoveDeployment(etcd!)),
    async client(hosts, name) {
      const mq = new Client();
      mq.on("error", (_error: KittenError) => {});
      clients.push(mq);
      await mq.connect({ ...harnessClientOptions(hosts, `${name}-${process.pid}-${Date.now()}`, 2000), sendTimeoutMs: 60_000 });
      return mq;
    },
  };
}
