/**
 * Memory per message held in memory: fills one durable queue (fsync store, budget large enough to
 * keep every message in memory, no consumer) with N messages, then restarts on the same store and
 * lets the pager read them all back, once with nobody registered (the messages wait in the
 * waiting list) and once with a consumer that takes nothing (they wait ready in its queue), and
 * reports what the JavaScript heap and resident memory grew by per message, after a full
 * collection, in each case.
 *
 * Each case runs in a process of its own, so that one case's garbage does not blur the next.
 *
 *   bun scripts/message_memory.ts [--count N] [--body BYTES]
 */
import { heapStats } from "bun:jsc";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Broker } from "../src/server/broker.ts";
import { groupKeyOf, Handler } from "../src/server/queue/message.ts";
import { parseConfig } from "../src/server/config/config.ts";
import { memoryLogger } from "../src/server/log.ts";
import { SqliteStore } from "../src/server/store/sqlite_store.ts";

const arg = (name: string, fallback: number) => {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 ? Number(process.argv[at + 1]) : fallback;
};
const count = arg("count", 200_000);
const bodyBytes = arg("body", 95);
const caseArg = process.argv.indexOf("--case");
const only = caseArg > 0 ? process.argv[caseArg + 1] : undefined;
const dirArg = process.argv.indexOf("--dir");
const directory = dirArg > 0 ? process.argv[dirArg + 1]! : mkdtempSync(join(tmpdir(), "kitten-memory-"));
const config = parseConfig({
  dataDirectory: directory,
  durability: "fsync",
  memoryBudgetBytes: 4 * 1024 * 1024 * 1024,
  maxMessagesPerQueue: 100_000_000,
});

function measure(): { heap: number; rss: number } {
  for (let i = 0; i < 3; i++) Bun.gc(true);
  return { heap: heapStats().heapSize + heapStats().extraMemorySize, rss: process.memoryUsage().rss };
}

function report(label: string, before: { heap: number; rss: number }, after: { heap: number; rss: number }, held: number): void {
  const heap = (after.heap - before.heap) / count;
  const rss = (after.rss - before.rss) / count;
  console.log(
    `${label}: ${held} messages in memory; JS heap ${heap.toFixed(0)} B/message (${(heap - bodyBytes).toFixed(0)} beyond the ${bodyBytes}-byte body), ` +
      `RSS ${rss.toFixed(0)} B/message (${(rss - bodyBytes).toFixed(0)} beyond)`,
  );
}

const sender = { clientId: "bench", grants: undefined as never };
const sent = async () => {
  const store = new SqliteStore({ directory, mode: "fsync", logger: memoryLogger() });
  const broker = new Broker(config, { logger: memoryLogger(), store });
  const body = new Uint8Array(bodyBytes).fill(120);
  const before = measure();
  let last: void | Promise<void> = undefined;
  for (let n = 0; n < count; n++) {
    last = broker.send("memory/v1/worker", `sender-1.${n.toString(36)}`, body, sender);
    if (n % 5000 === 4999) await last;
  }
  await last;
  await new Promise((resolve) => setTimeout(resolve, 50));
  const after = measure();
  report("sent", before, after, broker.queue("memory/v1").live);
  store.close();
};

const readBack = async (consumer: boolean) => {
  const store = new SqliteStore({ directory, mode: "fsync", logger: memoryLogger() });
  const broker = new Broker(config, { logger: memoryLogger(), store });
  const queue = broker.queue("memory/v1");
  // A consumer whose connection never drains: every message waits ready for it.
  const sink = { writable: () => false, deliver: () => {} };
  if (consumer) queue.subscribe(new Handler(0, 1, "consume", groupKeyOf("consume", "c"), new Set(["worker"]), 1, sink));
  const before = measure();
  broker.recover();
  while (queue.backlog.count > 0) await new Promise((resolve) => setImmediate(resolve));
  const after = measure();
  report(consumer ? "read back, ready for a consumer" : "read back, waiting", before, after, queue.live);
  store.close();
};

if (only === "sent") await sent();
else if (only === "waiting") await readBack(false);
else if (only === "ready") await readBack(true);
else {
  try {
    for (const name of ["sent", "waiting", "ready"]) {
      const args = [process.argv[1]!, "--case", name, "--dir", directory, "--count", String(count), "--body", String(bodyBytes)];
      const child = Bun.spawnSync([process.execPath, ...args], { stdout: "inherit", stderr: "inherit" });
      if (child.exitCode !== 0) throw new Error(`case ${name} failed`);
    }
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
}
