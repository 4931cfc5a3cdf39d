/**
 * The long failover run: `bun scripts/failover.ts --cycles 50 --consume-at-end`.
 *
 * Three broker processes in fsync mode on loopback, each listing the others in `cluster.peers`
 * (catch-up between brokers, `cluster.minInSyncReplicas` 2 unless told otherwise); a publisher
 * sends with confirms and a consumer consumes and acks, both clients of every broker. Each cycle,
 * at a random (seeded) moment, the master is killed with SIGKILL, and:
 *   - manual mode (default): an in-sync slave is promoted the way an operator does it (isMaster
 *     true in its config file, then SIGUSR2); the killed one comes back as a slave;
 *   - `--auto`: the brokers elect the master through etcd (a single etcd node the run starts on
 *     loopback); nothing is promoted by hand, and the time from the kill to the first send the new
 *     master confirms is measured (p50/p99);
 *   - `--kill-publisher`: the publisher is a process of its own, killed with the master at the
 *     same moment; it wrote each confirmed message to a file as its confirmation arrived, and
 *     every one of them must be delivered at the end.
 * At the end the last master delivers everything left, and every confirmed message must have
 * reached the consumer at least once.
 *
 * The last line is `failovers: N, confirmed: N, lost: N, duplicates: N`; the exit code is 1 when
 * lost > 0 (or when the run cannot finish).
 *
 * Options:
 *   --cycles N (10), --seed N (1)
 *   --min-run-ms / --max-run-ms  time between kills (300..1200)
 *   --window N                   sends awaiting confirmation (200)
 *   --rate N                     sends per second; default 5,000 when messages pile up
 *                                (--consume-at-end, --kill-publisher), unlimited otherwise
 *   --min-isr N                  cluster.minInSyncReplicas (2); with 3 (every broker) the killed
 *                                one is restarted before a send can be confirmed again
 *   --backlog N                  messages of 100 bytes sent first to a queue nobody consumes until
 *                                the end, when every one must be delivered (counted in the last
 *                                line's confirmed and lost)
 *   --memory-budget BYTES        memoryBudgetBytes: most of the backlog paged
 *   --no-peers                   no cluster.peers: clients-only mirroring, as brokers did before
 *                                catch-up existed
 *   --lease-ttl S (3), --verbose (the brokers' cluster lines)
 *   --consume-at-end             no consumer during the cycles: every message stays unacked, so
 *                                each new master must hold everything confirmed so far, including
 *                                what was confirmed while it was down
 *   --nack-delay-ms D            the consumer nacks every tenth message once with a delay of D ms,
 *                                and a line counts those delivered again before it was over (a new
 *                                master holds them back as the old one did)
 */
import { appendFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Client, type KittenError } from "../mod.ts";
import { waitFor } from "../tests/helpers/broker.ts";
import { countingInto, harnessClientOptions, nackingOnce, tally } from "../tests/helpers/crash.ts";
import { type EtcdCluster, startEtcd } from "../tests/helpers/etcd.ts";
import { testKeysDirectory } from "../tests/helpers/keys.ts";
import { mulberry32 } from "../tests/helpers/random.ts";
import { makeNodes, type Node } from "./failover/nodes.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    cycles: { type: "string", default: "10" },
    seed: { type: "string", default: "1" },
    "min-run-ms": { type: "string", default: "300" },
    "max-run-ms": { type: "string", default: "1200" },
    window: { type: "string", default: "200" },
    rate: { type: "string" },
    "min-isr": { type: "string", default: "2" },
    "lease-ttl": { type: "string", default: "3" },
    "memory-budget": { type: "string" },
    backlog: { type: "string", default: "0" },
    "no-peers": { type: "boolean", default: false },
    auto: { type: "boolean", default: false },
    "kill-publisher": { type: "boolean", default: false },
    verbose: { type: "boolean", default: false },
    "consume-at-end": { type: "boolean", default: false },
    "nack-delay-ms": { type: "string", default: "0" },
  },
});

type IntOption =
  | "cycles"
  | "seed"
  | "min-run-ms"
  | "max-run-ms"
  | "window"
  | "rate"
  | "min-isr"
  | "lease-ttl"
  | "memory-budget"
  | "backlog"
  | "nack-delay-ms";
const int = (name: IntOption, min: number, fallback?: number): number => {
  const value = values[name] === undefined ? fallback : Number(values[name]);
  if (value === undefined || !Number.isSafeInteger(value) || value < min) {
    console.error(`failover: --${name} must be an integer >= ${min} (got ${values[name]})`);
    process.exit(2);
  }
  return value;
};

const AUTO = values.auto;
const KILL_PUBLISHER = values["kill-publisher"];
const AT_END = values["consume-at-end"];
const CYCLES = int("cycles", 1);
const SEED = int("seed", 0);
const MIN_RUN_MS = int("min-run-ms", 0);
const MAX_RUN_MS = Math.max(MIN_RUN_MS, int("max-run-ms", 1));
const WINDOW = int("window", 1);
const RATE = int("rate", 0, AT_END || KILL_PUBLISHER ? 5_000 : 0);
const MIN_ISR = int("min-isr", 1);
const LEASE_TTL = int("lease-ttl", 2);
const PEERS = !values["no-peers"];
/** memoryBudgetBytes of the queue: small, most of the backlog is paged to the store. */
const MEMORY_BUDGET = values["memory-budget"] === undefined ? null : int("memory-budget", 1024);
const CHANNEL = "failover/v1";
/** Messages of 100 bytes sent before the cycles to a queue nobody consumes: the depth each failover must not pay for. */
const BACKLOG = int("backlog", 0);
const NACK_DELAY_MS = int("nack-delay-ms", 0);
const random = mulberry32(SEED);
if (NACK_DELAY_MS > 0 && AT_END) {
  console.error("failover: --nack-delay-ms needs a consumer during the cycles (drop --consume-at-end)");
  process.exit(2);
}
if (AUTO && !PEERS) {
  console.error("failover: --auto needs cluster.peers (drop --no-peers)");
  process.exit(2);
}

const root = mkdtempSync(join(tmpdir(), "kitten-failover-"));
let nodes: Node[] = [];
let etcd: EtcdCluster | null = null;
const runMs = () => Math.round(MIN_RUN_MS + random() * (MAX_RUN_MS - MIN_RUN_MS));
const clientOptions = (clientId: string) => harnessClientOptions(nodes.map((node) => node.host), clientId, WINDOW);

// ── the publisher: in this process, or a child process killed with the master ───────────────

const confirmed = new Set<number>();
const received = new Map<number, number>();
/** The backlog's messages delivered at the end (`n` → times): every one must be there. */
const backlogReceived = new Map<number, number>();
const BACKLOG_CHANNEL = "failover-backlog/v1";
const rejections = new Map<string, number>();
/** Milliseconds from each kill to the first send confirmed afterwards. */
const failoverTimes: number[] = [];
/** Kills after which no slave was in sync, so the master was restarted instead (and re-elected, in auto mode). */
let restarts = 0;
let sent = 0;
let pending = 0;
let publishing = true;
/** The consumer's nacks with a delay (--nack-delay-ms), and the deliveries that came too early. */
const nacking = nackingOnce(countingInto(received, "n"), NACK_DELAY_MS);
/** Set at a kill: the first send made after it that is confirmed gives the failover time. */
let killedAt: number | null = null;

const publisher = new Client();
const consumer = new Client();
const reported = new Map<string, number>();
for (const mq of [publisher, consumer]) {
  mq.on("error", (error: KittenError) => reported.set(error.code ?? "ERROR", (reported.get(error.code ?? "ERROR") ?? 0) + 1));
}

async function publishLoop(): Promise<void> {
  // A token bucket: paused sends (a failover) do not come back as a burst.
  let tokens = 0;
  let last = performance.now();
  while (publishing) {
    const now = performance.now();
    tokens = RATE > 0 ? Math.min(WINDOW, tokens + ((now - last) / 1000) * RATE) : WINDOW;
    last = now;
    while (publishing && pending < WINDOW && tokens >= 1) {
      tokens--;
      const n = sent++;
      pending++;
      const sentAt = performance.now();
      publisher.send(`${CHANNEL}/${n % 4}`, { n }).then(
        () => {
          confirmed.add(n);
          // Confirmations the old master wrote before it died can still arrive after the kill.
          if (killedAt !== null && sentAt > killedAt) {
            failoverTimes.push(performance.now() - killedAt);
            killedAt = null;
          }
        },
        (error: KittenError) => rejections.set(error.code, (rejections.get(error.code) ?? 0) + 1),
      ).finally(() => pending--);
    }
    await Bun.sleep(1);
  }
}

/** The child publishers of --kill-publisher, one per life; each appends what it saw confirmed. */
class ChildPublisher {
  proc: ReturnType<typeof Bun.spawn> | null = null;
  readonly file = join(root, "confirmed.txt");
  #life = 0;

  async start(): Promise<void> {
    const options = {
      hosts: nodes.map((node) => node.host),
      clientId: "failover-publisher",
      keysDirectory: testKeysDirectory,
      channel: CHANNEL,
      from: this.#life++ * 100_000_000, // each life sends its own numbers
      rate: RATE,
      window: WINDOW,
      file: this.file,
    };
    if (!existsSync(this.file)) appendFileSync(this.file, "");
    const proc = Bun.spawn([process.execPath, join(import.meta.dir, "failover/publisher.ts"), JSON.stringify(options)], {
      stdout: "pipe",
      stderr: "inherit",
    });
    this.proc = proc;
    const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
    const { value } = await reader.read();
    if (!new TextDecoder().decode(value).includes("ready")) throw new Error("the publisher process did not connect");
    reader.releaseLock();
  }

  async kill(): Promise<void> {
    this.proc?.kill("SIGKILL");
    await this.proc?.exited;
    this.proc = null;
  }

  /** Every n a publisher wrote to the file (confirmed before it died). */
  confirmed(): Set<number> {
    const set = new Set<number>();
    for (const line of readFileSync(this.file, "utf8").split("\n")) if (line) set.add(Number(line));
    return set;
  }
}

const childPublisher = KILL_PUBLISHER ? new ChildPublisher() : null;

const confirmedCount = () => childPublisher ? childPublisher.confirmed().size : confirmed.size;

// ── one failover ─────────────────────────────────────────────────────────────────────────────

/** The broker that is master now (manual mode: the one promoted last; auto: the one whose log says so). */
function currentMaster(promoted: Node | null): Node | undefined {
  if (!AUTO) return promoted ?? undefined;
  return nodes.find((node) => node.running && node.saysMaster);
}

/**
 * Manual mode: an operator promotes a slave that says it is in sync. When none is (both were
 * still catching up from the master just killed), promoting one could lose what the master
 * confirmed: the operator restarts the master instead, as a broker that cannot be promoted says.
 */
async function promoteInSync(killed: Node): Promise<{ node: Node; epoch: number; restarted: boolean }> {
  const candidates = () => nodes.filter((node) => node !== killed && node.running && (!PEERS || node.syncState === "in-sync"));
  const found = await waitFor(() => candidates().length > 0, 10_000, "a slave in sync to promote").then(() => true, () => false);
  if (!found) {
    await killed.start();
    return { node: killed, epoch: NaN, restarted: true };
  }
  const node = candidates()[0]!;
  return { node, epoch: await node.promote(), restarted: false };
}

/** The killed master comes back as a slave: it catches up from the new master. */
async function restartAsSlave(master: Node): Promise<void> {
  if (!AUTO) master.setMaster(false);
  await master.start();
}

async function cycle(index: number, promoted: Node | null): Promise<Node> {
  const ran = runMs();
  const before = confirmedCount();
  await Bun.sleep(ran);
  const master = currentMaster(promoted);
  if (!master) throw new Error("no master to kill");
  const inFlight = pending;
  const measured = failoverTimes.length;
  killedAt = performance.now();
  // The master, and with --kill-publisher the publisher, at the same moment.
  await Promise.all([master.kill(), childPublisher?.kill()]);
  let next: Node;
  let epoch = NaN;
  let restarted = false;
  if (AUTO) {
    // Only a broker in the recorded in-sync set stands. When no slave was in sync at the kill,
    // nobody is elected until the killed master is back (systemd restarts it): restart it then.
    const electedOther = () => nodes.some((node) => node !== master && node.running && node.saysMaster);
    const standing = (LEASE_TTL + 5) * 1000;
    if (!await waitFor(electedOther, standing, "a new master elected").then(() => true, () => false)) {
      restarted = true;
      restarts++;
      await master.start();
    }
    await waitFor(() => currentMaster(null) !== undefined, 60_000, "a master elected");
    next = currentMaster(null)!;
    epoch = Number([...next.output().matchAll(/elected master through etcd;epoch=(\d+)/g)].at(-1)?.[1] ?? NaN);
  } else {
    ({ node: next, epoch, restarted } = await promoteInSync(master));
    if (restarted) restarts++;
  }
  // With minInSyncReplicas as large as the cluster, nothing is confirmed until the killed broker is back in sync.
  const everyBrokerNeeded = MIN_ISR >= nodes.length;
  if (!restarted && everyBrokerNeeded) await restartAsSlave(master);
  if (!childPublisher) await waitFor(() => failoverTimes.length > measured, 60_000, "a send confirmed by the new master");
  if (!restarted && !everyBrokerNeeded) await restartAsSlave(master);
  if (childPublisher) await childPublisher.start();
  else {
    for (const mq of [publisher, consumer]) {
      await waitFor(() => mq.status().find((s) => s.host === next.host)?.master === true, 10_000, `clients follow ${next.name}`);
    }
  }
  console.log(
    `cycle ${index}: ran ${ran} ms, ${confirmedCount() - before} confirmed, ${inFlight} sends in flight at kill -9 of ` +
      `${master.name}; ${restarted ? `no slave in sync: ${master.name} restarted as master` : `${next.name} ${AUTO ? "elected" : "promoted"} (epoch ${epoch})`}` +
      `${childPublisher ? "" : `, confirming again after ${Math.round(failoverTimes.at(-1)!)} ms`}; ` +
      `${confirmedCount()} confirmed, ${received.size} delivered so far`,
  );
  return next;
}

/** The backlog, sent with confirms in batches before the cycles start. */
async function fillBacklog(): Promise<void> {
  const started = performance.now();
  const body = { p: "x".repeat(88) };
  for (let sent = 0; sent < BACKLOG;) {
    const batch = Math.min(WINDOW * 2, BACKLOG - sent);
    await Promise.all(Array.from({ length: batch }, (_, i) => publisher.send(`${BACKLOG_CHANNEL}/x`, { n: sent + i, ...body })));
    sent += batch;
  }
  console.log(`backlog: ${BACKLOG} messages confirmed in ${((performance.now() - started) / 1000).toFixed(1)} s (nobody consumes them)`);
}

// ── the run ──────────────────────────────────────────────────────────────────────────────────

async function main(): Promise<number> {
  const started = performance.now();
  if (AUTO) etcd = await startEtcd();
  nodes = await makeNodes(root, {
    count: 3,
    minInSyncReplicas: MIN_ISR,
    peers: PEERS,
    etcd: etcd?.endpoints ?? null,
    leaseTtlSeconds: LEASE_TTL,
    maxMessages: 20_000_000,
    memoryBudgetBytes: MEMORY_BUDGET,
  });
  mkdirSync(root, { recursive: true });
  await Promise.all(nodes.map((node) => node.start()));
  if (AUTO) await waitFor(() => currentMaster(null) !== undefined, 30_000, "a master elected");
  if (PEERS) await waitFor(() => nodes.filter((n) => n.syncState === "in-sync").length >= MIN_ISR - 1, 30_000, "slaves in sync");

  const handler = NACK_DELAY_MS === 0 ? countingInto(received, "n") : nacking.handler;
  const consume = () => consumer.consume(`${CHANNEL}/*`, handler, { prefetch: 1000 }).ready;
  await consumer.connect(clientOptions("failover-consumer"));
  if (!AT_END) await consume();
  let loop: Promise<void> = Promise.resolve();
  await publisher.connect(clientOptions("failover-publisher"));
  // The backlog goes first, also when a child process publishes during the cycles.
  if (BACKLOG > 0) await fillBacklog();
  if (childPublisher) {
    await publisher.disconnect();
    await childPublisher.start();
  } else {
    loop = publishLoop();
  }

  let promoted: Node | null = AUTO ? null : nodes[0]!;
  let failovers = 0;
  for (let index = 1; index <= CYCLES; index++) {
    promoted = await cycle(index, promoted);
    failovers++;
  }
  await Bun.sleep(runMs());
  publishing = false;
  await loop;
  await childPublisher?.kill();
  await waitFor(() => pending === 0, 60_000, "every send confirmed or refused");
  if (AT_END) await consume();
  const expected = childPublisher ? childPublisher.confirmed() : confirmed;
  await deliveredAll(expected, received, "confirmed messages");
  const { lost, duplicates, unconfirmedDelivered } = await tally(expected, received, 500);
  // Every backlog message survived every failover: the last master delivers each one.
  let backlogLost = 0;
  if (BACKLOG > 0) {
    await consumer.consume(`${BACKLOG_CHANNEL}/*`, countingInto(backlogReceived, "n"), { prefetch: 1000 }).ready;
    await deliveredAll(Array.from({ length: BACKLOG }, (_, n) => n), backlogReceived, "backlog messages");
    for (let n = 0; n < BACKLOG; n++) if (!backlogReceived.has(n)) backlogLost++;
    console.log(`backlog: ${BACKLOG} confirmed, ${backlogLost} lost`);
  }

  const clusterLines = nodes.flatMap((node) =>
    node.output().split("\n").filter((line) => /fenced|two masters|promoted|demoted|elected|stepped down|in sync/i.test(line))
  );
  if (values.verbose) for (const line of clusterLines) console.log(`  ${line}`);
  const fenced = clusterLines.filter((line) => line.includes("fenced:")).length;
  const codes = [...reported].filter(([code]) => code === "FENCED" || code === "TWO_MASTERS").map(([c, n]) => `${c} ×${n}`);
  const refused = [...rejections].map(([code, n]) => `${code} ×${n}`).join(", ");
  console.log(
    `mode: ${AUTO ? "automatic (etcd)" : "manual promotion"}${KILL_PUBLISHER ? ", publisher killed with the master" : ""}, ` +
      `${PEERS ? `cluster.peers, minInSyncReplicas ${MIN_ISR}` : "no cluster.peers"}; sent: ${childPublisher ? "(child)" : sent}, ` +
      `refused: ${refused || "none"}, delivered but never confirmed: ${unconfirmedDelivered}, brokers fenced: ${fenced}, ` +
      `client reports: ${codes.length ? codes.join(", ") : "none"}, seed: ${SEED}, ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
  if (failoverTimes.length > 0) {
    const sorted = [...failoverTimes].sort((a, b) => a - b);
    const at = (q: number) => Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!);
    console.log(`failover time (kill -9 → first send confirmed by the new master): p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms`);
  }
  if (lost.length > 0) console.log(`lost (first ${Math.min(20, lost.length)}): ${lost.slice(0, 20).join(", ")}`);
  if (NACK_DELAY_MS > 0) {
    const { nacked, early, uncounted } = nacking.delays;
    console.log(
      `delays: ${nacked} messages nacked with ${NACK_DELAY_MS} ms, ${early} delivered again before it was over, ` +
        `${uncounted} with nbRequeues 0`,
    );
  }
  if (restarts > 0) console.log(`of the ${failovers} kills, ${restarts} found no slave in sync: the master was restarted`);
  console.log(`failovers: ${failovers}, confirmed: ${expected.size + BACKLOG}, lost: ${lost.length + backlogLost}, duplicates: ${duplicates}`);
  return lost.length + backlogLost > 0 ? 1 : 0;
}

/**
 * Waits until every one of `expected` is in `got`, for as long as deliveries go on: a consumer far
 * behind (a small memory budget, a deep backlog) gets the time it needs, one that stopped gets 30 s.
 */
async function deliveredAll(expected: Iterable<number>, got: Map<number, number>, what: string): Promise<void> {
  const missing = new Set<number>();
  for (const n of expected) if (!got.has(n)) missing.add(n);
  let left = missing.size;
  let progressAt = Date.now();
  while (missing.size > 0) {
    for (const n of missing) if (got.has(n)) missing.delete(n);
    if (missing.size < left) {
      left = missing.size;
      progressAt = Date.now();
    } else if (Date.now() - progressAt > 30_000) {
      console.log(`warning: ${missing.size} ${what} not delivered, and none delivered for 30 s`);
      return;
    }
    await Bun.sleep(100);
  }
}

async function cleanup(): Promise<void> {
  publishing = false;
  await childPublisher?.kill();
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
  await etcd?.cleanup();
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
    const tail = node.output().trim().split("\n").filter((line) => line.includes("[cluster")).slice(-12).join("\n    ");
    if (tail) console.error(`  ${node.name} last lines:\n    ${tail}`);
  }
} finally {
  await cleanup();
}
process.exit(code);
