/**
 * The brokers of a failover run: three subprocesses on loopback, each with its own serviceId
 * (`b0`, `b1`, `b2`), port, folder and key pair, listing the others in `cluster.peers`. A node
 * can be killed with SIGKILL, started again on the same port and folder, and promoted the way an
 * operator does it (isMaster true in its file, then SIGUSR2). What a broker says about its
 * replication link (catching up, in sync, out of sync) is read from its log.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { freePort, waitFor } from "../../tests/helpers/broker.ts";
import { type ChildBroker, kill9, spawnBroker, writeBrokerConfig } from "../../tests/helpers/crash.ts";

export interface NodeOptions {
  count: number;
  minInSyncReplicas: number;
  /** With cluster.peers (catch-up between brokers); false reproduces clients-only mirroring. */
  peers: boolean;
  /** etcd endpoints: automatic failover. */
  etcd: string[] | null;
  leaseTtlSeconds: number;
  /** Bound of each queue (sends past it get QUEUE_FULL). */
  maxMessages: number;
  /** memoryBudgetBytes (null: the default). */
  memoryBudgetBytes: number | null;
}

export class Node {
  child: ChildBroker | null = null;
  constructor(readonly index: number, readonly configPath: string, readonly port: number) {}

  get name(): string {
    return `b${this.index}`;
  }

  get host(): string {
    return `127.0.0.1:${this.port}@${this.name}`;
  }

  get running(): boolean {
    return this.child !== null;
  }

  output(): string {
    return this.child?.output() ?? "";
  }

  async start(): Promise<void> {
    this.child = await spawnBroker(this.configPath, 30_000);
    if (this.child.port !== this.port) throw new Error(`${this.name} listens on ${this.child.port}, expected ${this.port}`);
  }

  async kill(): Promise<void> {
    if (!this.child) return;
    await kill9(this.child);
    this.child = null;
  }

  setMaster(isMaster: boolean): void {
    const config = JSON.parse(readFileSync(this.configPath, "utf8"));
    config.isMaster = isMaster;
    writeFileSync(this.configPath, JSON.stringify(config));
  }

  /** The operator's step: isMaster true in the file, SIGUSR2, and the broker's word that it is master. */
  async promote(): Promise<number> {
    const child = this.child!;
    const before = count(child.output(), "promoted to master");
    this.setMaster(true);
    child.proc.kill("SIGUSR2");
    await waitFor(
      () => count(child.output(), "promoted to master") > before || count(child.output(), "reload refused") > 0,
      10_000,
      `${this.name} promoted`,
    );
    const refused = [...child.output().matchAll(/reload refused: (.*)/g)].at(-1);
    if (count(child.output(), "promoted to master") === before) throw new Error(`${this.name}: ${refused?.[1]}`);
    const epochs = [...child.output().matchAll(/promoted to master;epoch=(\d+)/g)];
    return Number(epochs.at(-1)?.[1] ?? NaN);
  }

  /** What the broker last said about its link to the master. */
  get syncState(): "in-sync" | "catching-up" | "out-of-sync" | "unknown" {
    const lines = this.output().split("\n").filter((line) =>
      /peer=[^;]*@b\d;(in sync;epoch|out of sync;epoch|master epoch \d+;catching up)/.test(line)
    );
    const last = lines.at(-1) ?? "";
    if (last.includes(";in sync;")) return "in-sync";
    if (last.includes(";out of sync;")) return "out-of-sync";
    return last.includes("catching up") ? "catching-up" : "unknown";
  }

  /** True when the broker's log says it is master now (promoted or elected, not stepped down since). */
  get saysMaster(): boolean {
    // Its own role changes only: every broker also logs which peer etcd elected.
    const lines = this.output().split("\n").filter((line) =>
      /\] (promoted to master|elected master through etcd|stepped down to slave|demoted to slave|fenced, now a slave);/.test(line)
    );
    const last = lines.at(-1) ?? "";
    return last.includes("promoted to master;") || last.includes("elected master through etcd;");
  }
}

export const count = (text: string, what: string) => text.split(what).length - 1;

export async function makeNodes(root: string, options: NodeOptions): Promise<Node[]> {
  const ports = await Promise.all(Array.from({ length: options.count }, () => freePort()));
  const hosts = ports.map((port, i) => `127.0.0.1:${port}@b${i}`);
  return ports.map((port, i) => {
    const dir = join(root, `b${i}`);
    const configPath = writeBrokerConfig(dir, {
      serviceId: `b${i}`,
      socketServer: { port },
      isMaster: options.etcd === null && i === 0,
      keysDirectory: join(dir, "keys"),
      durability: "fsync",
      prefetch: 1000,
      maxItemsInQueue: options.maxMessages,
      maxMessagesPerQueue: options.maxMessages,
      ...(options.memoryBudgetBytes === null ? {} : { memoryBudgetBytes: options.memoryBudgetBytes }),
      logLevel: 2, // promotions, fencing and sync states are info lines
      cluster: {
        peers: options.peers ? hosts.filter((_, j) => j !== i) : [],
        minInSyncReplicas: options.peers ? options.minInSyncReplicas : 1,
        etcd: options.etcd ? { endpoints: options.etcd, leaseTtlSeconds: options.leaseTtlSeconds } : null,
      },
    });
    return new Node(i, configPath, port);
  });
}
