/**
 * Shared setup of the durability end-to-end tests (tests/e2e/durability_*_test.ts).
 *
 * Brokers that must survive a restart share a data directory made here (the test broker's own
 * temp folder is removed when it stops). Restarts in process use `stop()`, which commits what is
 * pending; the kill -9 tests run the broker as a process (tests/helpers/crash.ts).
 */
import { afterEach } from "bun:test";
import { join } from "node:path";
import type { Client } from "../../mod.ts";
import { Cleanup, type Received, type TestBroker } from "./broker.ts";
import { type ChildBroker, kill9 } from "./crash.ts";
import { TempDirs } from "./temp_dir.ts";
import { parseConfig } from "../../src/server/config/config.ts";
import { memoryLogger } from "../../src/server/log.ts";
import { type BrokerServer, startBroker } from "../../src/server/server.ts";
import type { Store } from "../../src/server/store/store.ts";

export interface DurabilityFixture {
  cleanup: Cleanup;
  temps: TempDirs;
  /** Subprocess brokers: killed (-9) after each test if still running. */
  children: ChildBroker[];
  /**
   * A broker in process with the store given (undefined: the one its config asks for) and the
   * clock given (default Date.now), and its server (`startTestBroker` takes neither, nor exposes
   * softStop).
   */
  inProcess(overrides: Record<string, unknown>, store?: Store | null, now?: () => number): TestBroker & { server: BrokerServer };
}

/** The fixture of one test file; registers the `afterEach` that stops and removes what it made. */
export function durabilityFixture(): DurabilityFixture {
  const cleanup = new Cleanup();
  const temps = new TempDirs("kitten-durable-");
  const children: ChildBroker[] = [];
  afterEach(async () => {
    for (const child of children.splice(0)) if (child.proc.exitCode === null && !child.proc.killed) await kill9(child);
    await cleanup.run();
    temps.removeAll(); // after its brokers stopped
  });
  const inProcess = (overrides: Record<string, unknown>, store?: Store | null, now?: () => number) => {
    const root = temps.make("kitten-broker-");
    const config = parseConfig({
      isManagementInterface: false,
      registeredClientsPath: join(root, "clients"),
      ...overrides,
      socketServer: { port: 0, host: "127.0.0.1" },
    });
    const logger = memoryLogger();
    const server = startBroker(config, { logger, store, now });
    return cleanup.add({
      port: server.port,
      broker: server.broker,
      logger,
      host: `127.0.0.1:${server.port}@broker-1`,
      stop: () => server.stop(),
      server,
    });
  };
  return { cleanup, temps, children, inProcess };
}

export const numbers = (got: Received[]) => got.map((r) => (r.message as { n: unknown }).n);
export const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);

/** Sends `{ n }` for every n, in order, each confirmed before the next. */
export async function sendAll(mq: Client, channel: string, ns: number[]): Promise<void> {
  for (const n of ns) await mq.send(channel, { n });
}

/** What a queue holds right after start: recovery runs before the port opens. */
export function live(broker: TestBroker, queue: string): number {
  return broker.broker.queues.get(queue)?.live ?? 0;
}
