/**
 * The long failover test (issue 6, item 6): `bun scripts/failover.ts --cycles 10 --seed 1`.
 *
 * Three broker processes in fsync mode (one master, two slaves) on loopback; a publisher sends
 * with confirms and a consumer consumes and acks, both clients of every broker. Each cycle, at a
 * random (seeded) moment, the master is killed with SIGKILL; the next broker is promoted the way
 * an operator does it (isMaster true in its config file, then SIGUSR2); the killed one is started
 * again as a slave (isMaster false in its file). At the end the last master delivers everything
 * left, and every confirmed message must have reached the consumer at least once.
 *
 * The last line is `failovers: N, confirmed: N, lost: N, duplicates: N`; the exit code is 1 when
 * lost > 0 (or when the run cannot finish).
 *
 * Options: --cycles N (10), --seed N (1), --min-run-ms / --max-run-ms (time between kills,
 * 300..1200), --window N (sends awaiting confirmation, 200), --verbose (brokers' log lines about
 * the cluster: promotions, fencing), --consume-at-end (no consumer during the cycles: every
 * message stays unacked, so each promoted broker must hold everything confirmed so far, including
 * what was confirmed while it was down and restarting).
 */
import { readFileSync, rmSync, writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Client, type KittenError } from "../mod.ts";
import { freePort, waitFor } from "../tests/helpers/broker.ts";
import {
  type ChildBroker,
  harnessClientOptions,
  kill9,
  spawnBroker,
  tally,
  writeBrokerConfig,
} from "../tests/helpers/crash.ts";
import { mulberry32 } from "../tests/helpers/random.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    cycles: { type: "string", default: "10" },
    seed: { type: "string", default: "1" },
    "min-run-ms": { type: "string", default: "300" },
    "max-run-ms": { type: "string", default: "1200" },
    window: { type: "string", default: "200" },
    verbose: { type: "boolean", default: false },
    "consume-at-end": { type: "boolean", default: false },
  },
});

const int = (name: "cycles" | "seed" | "min-run-ms" | "max-run-ms" | "window", min: number): number => {
  const value = Number(values[name]);
  if (!Number.isSafeInteger(value) || value < min) {
    console.error(`failover: --${name} must be an integer >= ${min} (got ${values[name]})`);
    process.exit(2);
  }
  return value;
};

const CYCLES = int("cycles", 1);
const SEED = int("seed", 0);
const MIN_RUN_MS = int("min-run-ms", 0);
const MAX_RUN_MS = Math.max(MIN_RUN_MS, int("max-run-ms", 1));
const WINDOW = int("window", 1);
const BROKERS = 3;
const CHANNEL = "failover/v1";
const random = mulberry32(SEED);

interface Node {
  index: number;
  configPath: string;
  port: number;
  host: string;
  child: ChildBroker | null;
}

const root = mkdtempSync(join(tmpdir(), "kitten-failover-"));
const nodes: Node[] = [];

function setMaster(node: Node, isMaster: boolean): void {
  const config = JSON.parse(readFileSync(node.configPath, "utf8"));
  config.isMaster = isMaster;
  writeFileSync(node.configPath, JSON.stringify(config));
}

async function start(node: Node): Promise<void> {
  node.child = await spawnBroker(node.configPath);
  if (node.child.port !== node.port) throw new Error(`broker ${node.index} listens on ${node.child.port}, expected ${node.port}`);
}

const count = (text: string, what: string) => text.split(what).length - 1;

/** The operator's step: isMaster true in the file, SIGUSR2, and the broker's word that it is master. */
async function promote(node: Node): Promise<number> {
  const child = node.child!;
  const before = count(child.output(), "promoted to master");
  setMaster(node, true);
  child.proc.kill("SIGUSR2");
  await waitFor(() => count(child.output(), "promoted to master") > before, 5000, `broker ${node.index} promoted`);
  const epochs = [...child.output().matchAll(/promoted to master;epoch=(\d+)/g)];
  return Number(epochs.at(-1)?.[1] ?? NaN);
}

const clientOptions = (clientId: string) => harnessClientOptions(nodes.map((node) => node.host), clientId, WINDOW);

const publisher = new Client();
const consumer = new Client();
/** Error codes the clients reported (network errors of the killed broker, FENCED, TWO_MASTERS…). */
const reported = new Map<string, number>();
for (const mq of [publisher, consumer]) {
  mq.on("error", (error: KittenError) => reported.set(error.code ?? "ERROR", (reported.get(error.code ?? "ERROR") ?? 0) + 1));
}

const confirmed = new Set<number>();
const received = new Map<number, number>();
const rejections = new Map<string, number>();
let sent = 0;
let pending = 0;
let publishing = true;

async function publishLoop(): Promise<void> {
  while (publishing) {
    while (publishing && pending < WINDOW) {
      const n = sent++;
      pending++;
      publisher.send(`${CHANNEL}/${n % 4}`, { n }).then(
        () => confirmed.add(n),
        (error: KittenError) => rejections.set(error.code, (rejections.get(error.code) ?? 0) + 1),
      ).finally(() => pending--);
    }
    await Bun.sleep(1);
  }
}

async function main(): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < BROKERS; i++) {
    const port = await freePort();
    const configPath = writeBrokerConfig(join(root, `broker-${i}`), {
      socketServer: { port },
      isMaster: i === 0,
      durability: "fsync",
      prefetch: 1000,
      maxItemsInQueue: 10_000_000,
      logLevel: 2, // promotions and fencing are info/error lines
    });
    nodes.push({ index: i, configPath, port, host: `127.0.0.1:${port}@broker-1`, child: null });
  }
  await Promise.all(nodes.map(start));
  let master = 0;
  await publisher.connect(clientOptions("failover-publisher"));
  const consume = () =>
    consumer.consume(`${CHANNEL}/*`, (error, message, done) => {
      if (error) return;
      const n = (message as { n: number }).n;
      received.set(n, (received.get(n) ?? 0) + 1);
      done();
    }, { prefetch: 1000 }).ready;
  await consumer.connect(clientOptions("failover-consumer"));
  if (!values["consume-at-end"]) await consume();
  const loop = publishLoop();

  let failovers = 0;
  for (let cycle = 1; cycle <= CYCLES; cycle++) {
    const runMs = Math.round(MIN_RUN_MS + random() * (MAX_RUN_MS - MIN_RUN_MS));
    const confirmedBefore = confirmed.size;
    await Bun.sleep(runMs);
    const killed = nodes[master]!;
    const inFlight = pending;
    await kill9(killed.child!);
    killed.child = null;
    const next = nodes[(master + 1) % BROKERS]!;
    const epoch = await promote(next);
    master = next.index;
    failovers++;
    // The killed broker comes back as a slave of the new master.
    setMaster(killed, false);
    await start(killed);
    // Both clients follow the new master (welcome / ROLE) before the next kill.
    for (const mq of [publisher, consumer]) {
      await waitFor(() => mq.status().find((s) => s.host === next.host)?.master === true, 5000, `clients follow broker ${next.index}`);
    }
    console.log(
      `cycle ${cycle}: ran ${runMs} ms, ${confirmed.size - confirmedBefore} confirmed, ${inFlight} sends in flight at kill -9 ` +
        `of broker ${killed.index}; broker ${next.index} promoted (epoch ${epoch}); ${confirmed.size} confirmed, ` +
        `${received.size} delivered so far`,
    );
  }
  // Let the last master take more sends, then stop publishing and settle everything.
  await Bun.sleep(Math.round(MIN_RUN_MS + random() * (MAX_RUN_MS - MIN_RUN_MS)));
  publishing = false;
  await loop;
  await waitFor(() => pending === 0, 30_000, "every send confirmed or rejected");
  if (values["consume-at-end"]) await consume();
  await waitFor(() => [...confirmed].every((n) => received.has(n)), 30_000, "every confirmed message delivered").catch(
    (error) => console.log(`warning: ${(error as Error).message}`),
  );
  const { lost, duplicates, unconfirmedDelivered } = await tally(confirmed, received, 500);
  const clusterLines = nodes.flatMap((node) =>
    (node.child?.output() ?? "").split("\n").filter((line) => /fenced|two masters|promoted|demoted/i.test(line))
  );
  if (values.verbose) for (const line of clusterLines) console.log(`  ${line}`);
  const fenced = clusterLines.filter((line) => line.includes("fenced:")).length;
  const codes = [...reported].filter(([code]) => code === "FENCED" || code === "TWO_MASTERS").map(([c, n]) => `${c} ×${n}`);
  console.log(
    `sent: ${sent}, rejected: ${[...rejections.values()].reduce((a, b) => a + b, 0)}` +
      `${rejections.size ? ` (${[...rejections.keys()].join(", ")})` : ""}, delivered but never confirmed: ${unconfirmedDelivered}, ` +
      `brokers fenced: ${fenced}, client reports: ${codes.length ? codes.join(", ") : "none"}, seed: ${SEED}, ` +
      `${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
  if (lost.length > 0) console.log(`lost (first ${Math.min(20, lost.length)}): ${lost.slice(0, 20).join(", ")}`);
  console.log(`failovers: ${failovers}, confirmed: ${confirmed.size}, lost: ${lost.length}, duplicates: ${duplicates}`);
  return lost.length > 0 ? 1 : 0;
}

async function cleanup(): Promise<void> {
  publishing = false;
  await publisher.disconnect().catch(() => {});
  await consumer.disconnect().catch(() => {});
  for (const node of nodes) {
    const child = node.child;
    if (!child) continue;
    child.proc.kill("SIGTERM");
    const timer = setTimeout(() => child.proc.kill("SIGKILL"), 5000);
    await child.exited;
    clearTimeout(timer);
  }
  rmSync(root, { recursive: true, force: true });
}

process.once("SIGINT", () => {
  console.error("failover: interrupted");
  cleanup().finally(() => process.exit(130));
});

let code = 1;
try {
  code = await main();
} catch (error) {
  console.error(`failover: ${(error as Error)?.stack ?? error}`);
  for (const node of nodes) {
    const tail = node.child?.output().trim().split("\n").slice(-5).join("\n    ");
    if (tail) console.error(`  broker ${node.index} last lines:\n    ${tail}`);
  }
} finally {
  await cleanup();
}
process.exit(code);
