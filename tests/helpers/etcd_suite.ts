/**
 * What the tests of one file that spread queues over groups share: one etcd for the file (started
 * before its first test, stopped after its last), the cleanups each test registers (run after it,
 * last registered first), the `cluster` section of a group's only broker, and an in-process broker
 * with its admin app.
 */
import { afterAll, afterEach, beforeAll } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Hono } from "hono";
import { createAdminApp } from "../../src/admin/mod.ts";
import { type BrokerServer, memoryLogger, parseConfig, startBroker } from "../../src/server/mod.ts";
import { type EtcdCluster, startEtcd } from "./etcd.ts";

export interface EtcdSuite {
  /** The file's etcd (from its first test on). */
  readonly etcd: EtcdCluster;
  /** Runs `cleanup` after the current test. */
  defer(cleanup: () => unknown): void;
  /** The `cluster` section of the only broker of `group` under `prefix`. */
  groupCluster(group: string, prefix: string): Record<string, unknown>;
}

export function etcdSuite(): EtcdSuite {
  let etcd: EtcdCluster | undefined;
  const cleanups: (() => unknown)[] = [];
  beforeAll(async () => {
    etcd = await startEtcd();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await Promise.resolve().then(cleanup).catch(() => {});
  });
  afterAll(async () => {
    await etcd?.cleanup();
  });
  return {
    get etcd() {
      if (!etcd) throw new Error("etcd is started before the file's first test");
      return etcd;
    },
    defer: (cleanup) => void cleanups.push(cleanup),
    groupCluster(group, prefix) {
      return { peers: [], minInSyncReplicas: 1, group, etcd: { endpoints: this.etcd.endpoints, leaseTtlSeconds: 2, prefix } };
    },
  };
}

/** An in-process broker on loopback, port 0, in memory, with its own folders and its admin app; stopped after the test. */
export function adminBroker(suite: EtcdSuite, overrides: Record<string, unknown> = {}): { server: BrokerServer; app: Hono } {
  const dir = mkdtempSync(join(tmpdir(), "kitten-admin-"));
  const server = startBroker(parseConfig({
    socketServer: { port: 0, host: "127.0.0.1" },
    isManagementInterface: false,
    durability: "memory",
    registeredClientsPath: join(dir, "clients"),
    dataDirectory: join(dir, "data"),
    keysDirectory: join(dir, "keys"),
    ...overrides,
  }), { logger: memoryLogger() });
  suite.defer(() => rmSync(dir, { recursive: true, force: true }));
  suite.defer(() => server.stop());
  return { server, app: createAdminApp(server) };
}
