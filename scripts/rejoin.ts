/**
 * What a failover costs at depth: `bun scripts/rejoin.ts --backlog 1000000 --kills 3`.
 *
 * Three broker processes in fsync mode on one etcd (`minInSyncReplicas` 2, `leaseTtlSeconds` 3),
 * a backlog of 100-byte messages nobody consumes, then a publisher at 1,000 msg/s with 200 sends
 * in flight. Each kill: kill -9 of the master; the killed broker is started again 3 s later. It
 * prints, per kill and as medians: the first send confirmed after the kill, the surviving slave
 * back in the new master's in-sync set (after the election), the killed broker in sync after its
 * restart, how it caught up (from its position, or a snapshot) and the bytes the new master sent
 * it, and the sends refused to the application. The last line counts lost messages: every
 * confirmed message is consumed at the end.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Client, type KittenError } from "../mod.ts";
import { waitFor } from "../tests/helpers/broker.ts";
import { countingInto, harnessClientOptions, tally } from "../tests/helpers/crash.ts";
import { startEtcd } from "../tests/helpers/etcd.ts";
import { count, makeNodes, type Node } from "./failover/nodes.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    backlog: { type: "string", default: "100000" },
    kills: { type: "string", default: "3" },
    rate: { type: "string", default: "1000" },
    window: { type: "string", default: "200" },
    json: { type: "boolean", default: false },
  },
});
const BACKLOG = Number(values.backlog);
const KILLS = Number(values.kills);
const RATE = Number(values.rate);
const WINDOW = Number(values.window);
const CHANNEL = "rejoin/v1/x";
const BODY = { p: "x".repeat(88) }; // about 100 bytes encoded

const root = mkdtempSync(join(tmpdir(), "kitten-rejoin-"));
const etcd = await startEtcd();
const nodes = await makeNodes(root, {
  count: 3,
  minInSyncReplicas: 2,
  peers: true,
  etcd: etcd.endpoints,
  leaseTtlSeconds: 3,
  maxMessages: 50_000_000,
  memoryBudgetBytes: null,
});
const master = () => nodes.find((node) => node.running && node.saysMaster);
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

const publisher = new Client();
publisher.on("error", () => {});
const confirmed = new Set<number>();
const refused = new Map<string, number>();
let next = 0;
let firstConfirmAfter: number | null = null;
let killedAt = 0;

async function fill(): Promise<void> {
  const started = performance.now();
  let pending: Promise<unknown>[] = [];
  for (let i = 0; i < BACKLOG; i++) {
    const n = next++;
    pending.push(publisher.send(CHANNEL, { n, ...BODY }).then(() => confirmed.add(n)));
    if (pending.length === 2_000) {
      await Promise.all(pending);
      pending = [];
    }
  }
  await Promise.all(pending);
  console.log(`backlog: ${BACKLOG} messages confirmed in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

let publishing = true;
async function publishLoop(): Promise<void> {
  let inFlight = 0;
  const interval = 1000 / RATE;
  let due = performance.now();
  while (publishing) {
    const now = performance.now();
    while (publishing && inFlight < WINDOW && due <= now) {
      due += interval;
      const n = next++;
      inFlight++;
      publisher.send(CHANNEL, { n, ...BODY }).then(
        () => {
          confirmed.add(n);
          if (firstConfirmAfter === null && killedAt > 0) firstConfirmAfter = performance.now() - killedAt;
        },
        (error: KittenError) => refused.set(error.code ?? "ERROR", (refused.get(error.code ?? "ERROR") ?? 0) + 1),
      ).finally(() => inFlight--);
    }
    if (due < now - 1000) due = now; // no burst after a pause
    await Bun.sleep(2);
  }
}

const inSyncLines = (node: Node) => count(node.output(), ";in sync;epoch=");

interface Kill {
  firstConfirmMs: number;
  survivorInSyncMs: number;
  rejoinInSyncMs: number;
  catchUp: string;
  bytes: number;
}

async function killOnce(): Promise<Kill> {
  const old = master()!;
  const survivor = nodes.find((node) => node !== old && node.syncState === "in-sync") ?? nodes.find((node) => node !== old)!;
  const survivorBefore = inSyncLines(survivor);
  firstConfirmAfter = null;
  killedAt = performance.now();
  await old.kill();
  await waitFor(() => master() !== undefined && master() !== old, 30_000, "a new master elected");
  const elected = master()!;
  const electedAt = performance.now();
  const other = nodes.find((node) => node !== old && node !== elected)!;
  const otherBefore = other === survivor ? survivorBefore : inSyncLines(other);
  await waitFor(() => inSyncLines(other) > otherBefore, 60_000, `${other.name} in sync with ${elected.name}`);
  const survivorInSyncMs = performance.now() - electedAt;
  await Bun.sleep(Math.max(0, 3_000 - (performance.now() - killedAt)));
  await old.start();
  const restartedAt = performance.now();
  await waitFor(() => old.syncState === "in-sync", 120_000, `${old.name} in sync after its restart`);
  const rejoinInSyncMs = performance.now() - restartedAt;
  await waitFor(() => firstConfirmAfter !== null, 60_000, "a send confirmed after the kill");
  const line = [...elected.output().matchAll(new RegExp(`peer=${old.name};catching up(.*)`, "g"))].at(-1)?.[1] ?? "";
  const position = /from index \d+;entries=(\d+);bytes=(\d+)/.exec(line);
  const snapshot = /snapshot=(\d+) messages/.exec(line);
  const result: Kill = {
    firstConfirmMs: firstConfirmAfter!,
    survivorInSyncMs,
    rejoinInSyncMs,
    catchUp: position ? `position (${position[1]} entries)` : `snapshot (${snapshot?.[1]} messages)`,
    bytes: position ? Number(position[2]) : NaN,
  };
  console.log(
    `kill of ${old.name}: first confirm ${Math.round(result.firstConfirmMs)} ms; ${other.name} in ${elected.name}'s in-sync set ` +
      `${Math.round(survivorInSyncMs)} ms after the election; ${old.name} in sync ${Math.round(rejoinInSyncMs)} ms after its restart, ` +
      `from a ${result.catchUp}${position ? `, ${result.bytes} bytes` : ""}`,
  );
  return result;
}

async function main(): Promise<number> {
  await Promise.all(nodes.map((node) => node.start()));
  await waitFor(() => master() !== undefined, 30_000, "a master elected");
  await waitFor(() => nodes.filter((node) => node.syncState === "in-sync").length >= 2, 30_000, "slaves in sync");
  await publisher.connect(harnessClientOptions(nodes.map((node) => node.host), "rejoin-publisher", 2_000));
  await fill();
  const loop = publishLoop();
  await Bun.sleep(1_000);
  const kills: Kill[] = [];
  for (let i = 0; i < KILLS; i++) {
    kills.push(await killOnce());
    await Bun.sleep(1_000);
  }
  publishing = false;
  await loop;
  await Bun.sleep(500);
  // Every confirmed message is delivered by the last master.
  const consumer = new Client();
  consumer.on("error", () => {});
  await consumer.connect(harnessClientOptions(nodes.map((node) => node.host), "rejoin-consumer", WINDOW));
  const received = new Map<number, number>();
  await consumer.consume("rejoin/v1/*", countingInto(received, "n"), { prefetch: 1000 }).ready;
  await waitFor(() => [...confirmed].every((n) => received.has(n)), 300_000, "every confirmed message consumed").catch(() => {});
  const { lost: lostIds, duplicates, unconfirmedDelivered } = await tally(confirmed, received, 500);
  const lost = lostIds.length;
  const refusedTotal = [...refused.values()].reduce((a, b) => a + b, 0);
  const summary = {
    backlog: BACKLOG,
    kills: kills.length,
    firstConfirmMs: Math.round(median(kills.map((k) => k.firstConfirmMs))),
    survivorInSyncMs: Math.round(median(kills.map((k) => k.survivorInSyncMs))),
    rejoinInSyncMs: Math.round(median(kills.map((k) => k.rejoinInSyncMs))),
    rejoinBytes: median(kills.map((k) => k.bytes)),
    catchUps: kills.map((k) => k.catchUp),
    refused: refusedTotal,
    refusedByCode: Object.fromEntries(refused),
    confirmed: confirmed.size,
    lost,
    duplicates,
    unconfirmedDelivered,
  };
  if (values.json) console.log(JSON.stringify(summary));
  console.log(
    `rejoin at ${BACKLOG}: medians of ${kills.length} kills: first confirm ${summary.firstConfirmMs} ms, survivor in sync ` +
      `${summary.survivorInSyncMs} ms after the election, killed broker in sync ${summary.rejoinInSyncMs} ms after its restart ` +
      `(${summary.rejoinBytes} bytes sent to it); sends refused to the application: ${refusedTotal} ` +
      `${JSON.stringify(summary.refusedByCode)}`,
  );
  console.log(`confirmed: ${confirmed.size}, lost: ${lost}, duplicates: ${duplicates}, delivered but never confirmed: ${unconfirmedDelivered}`);
  await Promise.all([publisher.disconnect(), consumer.disconnect()]);
  return lost === 0 ? 0 : 1;
}

let code = 1;
try {
  code = await main();
} catch (error) {
  console.error(`rejoin: ${(error as Error).message}`);
} finally {
  for (const node of nodes) await node.kill();
  await etcd.cleanup();
  rmSync(root, { recursive: true, force: true });
}
process.exit(code);
