/**
 * Subprocess brokers and the kill -9 crash harness, shared by tests/e2e/durability_test.ts (a
 * bounded run inside `npm test`) and scripts/crash.ts (the long run).
 *
 * A broker runs as `bun src/cli/main.ts start --config FILE` in its own process, so it can be
 * killed with SIGKILL in the middle of a commit: nothing in this process can clean up after it.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, type ConsumeHandler } from "../../mod.ts";
import { freePort, waitFor } from "./broker.ts";
import { testKeysDirectory } from "./keys.ts";
import { mulberry32 } from "./random.ts";

const MAIN = join(import.meta.dir, "../../src/cli/main.ts");

export interface ChildBroker {
  readonly proc: ReturnType<typeof Bun.spawn>;
  readonly port: number;
  /** `127.0.0.1:<port>@broker-1`. */
  readonly host: string;
  /** Everything the broker wrote so far (stdout and stderr). */
  output(): string;
  /** Resolves with the exit code (null when killed by a signal). */
  readonly exited: Promise<number | null>;
}

/** Writes a broker config file in `directory` (port 0 unless given) and returns its path. */
export function writeBrokerConfig(directory: string, config: Record<string, unknown>): string {
  mkdirSync(directory, { recursive: true });
  const path = join(directory, `broker-${Date.now()}-${Math.random().toString(36).slice(2)}.json`);
  const socketServer = { port: 0, host: "127.0.0.1", ...(config.socketServer as Record<string, unknown> | undefined) };
  writeFileSync(
    path,
    JSON.stringify({
      isManagementInterface: false,
      registeredClientsPath: join(directory, "clients"),
      dataDirectory: join(directory, "data"),
      logLevel: 2,
      ...config,
      socketServer,
    }),
  );
  return path;
}

/** Starts a broker process and resolves once it prints `kitten-mq listening on HOST:PORT`. */
export async function spawnBroker(configPath: string, timeoutMs = 10_000): Promise<ChildBroker> {
  const proc = Bun.spawn([process.execPath, MAIN, "start", "--config", configPath], {
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, NO_COLOR: "1" },
  });
  let text = "";
  const drain = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) text += decoder.decode(chunk, { stream: true });
  };
  const drained = Promise.all([drain(proc.stdout as ReadableStream<Uint8Array>), drain(proc.stderr as ReadableStream<Uint8Array>)]);
  const exited = proc.exited.then(async (code) => {
    await drained.catch(() => {});
    return proc.signalCode ? null : code;
  });
  let gone = false;
  exited.then(() => (gone = true));
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const match = /kitten-mq listening on [^\s:]+:(\d+)/.exec(text);
    if (match) {
      const port = Number(match[1]);
      return { proc, port, host: `127.0.0.1:${port}@broker-1`, output: () => text, exited };
    }
    if (gone) throw new Error(`the broker exited before listening (code ${proc.exitCode}):\n${text}`);
    if (Date.now() > deadline) {
      proc.kill("SIGKILL");
      throw new Error(`the broker did not listen within ${timeoutMs} ms:\n${text}`);
    }
    await Bun.sleep(5);
  }
}

/** SIGKILL, and wait until the process is gone (its store lock released). */
export async function kill9(broker: ChildBroker): Promise<void> {
  broker.proc.kill("SIGKILL");
  await broker.exited;
}

export interface CrashOptions {
  /** kill -9 cycles; the broker is started `cycles + 1` times. */
  cycles: number;
  /** Seed of the random kill moments. */
  seed: number;
  /** Each run lasts a random time in [minRunMs, maxRunMs] after the broker listens. */
  minRunMs?: number;
  maxRunMs?: number;
  /** Sends awaiting confirmation at any time. */
  window?: number;
  /** Also consume (and ack) during the cycles, so acks are lost by the kills too. */
  liveConsumer?: boolean;
  /**
   * Messages sent first to a queue of their own that nobody consumes until the end: every kill
   * and restart happens with them stored (the restart reads one page of them, not all).
   */
  backlog?: number;
  /**
   * With `liveConsumer`: the first delivery of every tenth message is nacked with this delay
   * (ms), and a later delivery of it before the delay is over is counted (`delays.early`): the
   * delay must outlive the kills.
   */
  nackDelayMs?: number;
  /** Progress lines (the script prints them). */
  log?: (line: string) => void;
}

export interface CrashResult {
  cycles: number;
  /** Distinct messages whose send was confirmed. */
  confirmed: number;
  /** Messages sent (each is eventually confirmed: the client replays unconfirmed sends). */
  sent: number;
  /** Confirmed messages never delivered. */
  lost: number;
  /** Deliveries beyond the first of a message. */
  duplicates: number;
  /** Messages delivered that were never confirmed (must be 0: every send is confirmed in the end). */
  unconfirmedDelivered: number;
  /** Sends rejected (not confirmed, so not expected back). */
  rejected: number;
  /** Confirmations per cycle (before each kill). */
  confirmedPerCycle: number[];
  /** First lost message numbers (at most 20), for the report. */
  lostSample: number[];
  /** Rejection codes seen. */
  rejectionCodes: string[];
  /** Per restart: ms from the spawn to the listening line (with the backlog stored). */
  restartMs: number[];
  /** Backlog messages confirmed, and those not delivered at the end. */
  backlog: { confirmed: number; lost: number };
  /** Messages nacked with `nackDelayMs`, and those delivered again before it was over. */
  delays: { nacked: number; early: number; uncounted: number };
}

const CHANNEL = "crash/v1";
const KEPT = "crash-kept/v1";

/**
 * Publishes with confirms in a loop while a subprocess broker in fsync mode is killed with
 * SIGKILL at random (seeded) moments and restarted on the same port and data directory; then
 * consumes everything and checks every confirmed message arrived at least once.
 */
export async function runCrashTest(options: CrashOptions): Promise<CrashResult> {
  const { cycles, seed, minRunMs = 150, maxRunMs = 600, window = 200, liveConsumer = false, backlog = 0, nackDelayMs = 0 } = options;
  const log = options.log ?? (() => {});
  const random = mulberry32(seed);
  const root = mkdtempSync(join(tmpdir(), "kitten-crash-e2e-"));
  const port = await freePort();
  const configPath = writeBrokerConfig(root, {
    socketServer: { port },
    durability: "fsync",
    prefetch: 1000,
    maxItemsInQueue: 10_000_000,
    logLevel: 3,
  });
  const host = `127.0.0.1:${port}@broker-1`;
  const clientOptions = (clientId: string) => harnessClientOptions([host], clientId, window);

  const publisher = new Client();
  const consumer = new Client();
  publisher.on("error", () => {});
  consumer.on("error", () => {});
  const confirmed = new Set<number>();
  const received = new Map<number, number>();
  const rejectionCodes = new Set<string>();
  let rejected = 0;
  let sent = 0;
  let pending = 0;
  let publishing = true;
  let broker: ChildBroker | null = null;
  const confirmedPerCycle: number[] = [];
  const restartMs: number[] = [];
  const kept = new Set<number>();
  const keptReceived = new Map<number, number>();

  const counting = countingInto(received, "n");
  const nacking = nackingOnce(counting, nackDelayMs);
  const consume = () => consumer.consume(`${CHANNEL}/*`, nackDelayMs === 0 ? counting : nacking.handler, { prefetch: 1000 });

  const publishLoop = async () => {
    while (publishing) {
      while (publishing && pending < window) {
        const n = sent++;
        pending++;
        publisher.send(`${CHANNEL}/${n % 4}`, { n }).then(
          () => confirmed.add(n),
          (error: { code?: string }) => {
            rejected++;
            rejectionCodes.add(String(error?.code));
          },
        ).finally(() => pending--);
      }
      await Bun.sleep(1);
    }
  };

  try {
    broker = await spawnBroker(configPath);
    await publisher.connect(clientOptions("crash-publisher"));
    for (let n = 0; n < backlog; n += window) {
      const batch = Array.from({ length: Math.min(window, backlog - n) }, (_, i) => n + i);
      await Promise.all(batch.map((k) => publisher.send(`${KEPT}/x`, { k }).then(() => kept.add(k))));
    }
    if (backlog > 0) log(`backlog: ${kept.size} messages confirmed in ${KEPT}`);
    if (liveConsumer) {
      await consumer.connect(clientOptions("crash-consumer"));
      await consume().ready;
    }
    const loop = publishLoop();
    for (let cycle = 1; cycle <= cycles; cycle++) {
      const runMs = Math.round(minRunMs + random() * (maxRunMs - minRunMs));
      const before = confirmed.size;
      await Bun.sleep(runMs);
      const inFlight = pending;
      await kill9(broker);
      broker = null;
      confirmedPerCycle.push(confirmed.size - before);
      const spawned = performance.now();
      broker = await spawnBroker(configPath);
      restartMs.push(Math.round(performance.now() - spawned));
      log(
        `cycle ${cycle}: ran ${runMs} ms, ${confirmed.size - before} confirmed, ${inFlight} sends in flight at kill -9; ` +
          `restarted in ${restartMs.at(-1)} ms`,
      );
    }
    // The last broker stays up: every send still unconfirmed is replayed to it and confirmed.
    publishing = false;
    await loop;
    await waitFor(() => pending === 0, 20_000, "every send confirmed or rejected");
    if (!liveConsumer) {
      await consumer.connect(clientOptions("crash-consumer"));
      await consume().ready;
    }
    await waitFor(() => [...confirmed].every((n) => received.has(n)), 20_000, "every confirmed message delivered").catch(() => {});
    const { lost: lostList, duplicates, unconfirmedDelivered } = await tally(confirmed, received, 300);
    if (backlog > 0) {
      await consumer.consume(`${KEPT}/*`, countingInto(keptReceived, "k"), { prefetch: 1000 }).ready;
      await waitFor(() => [...kept].every((k) => keptReceived.has(k)), 300_000, "the backlog delivered").catch(() => {});
    }
    const keptLost = [...kept].filter((k) => !keptReceived.has(k)).length;
    await publisher.disconnect();
    await consumer.disconnect();
    // A soft stop (SIGTERM) of the last broker must exit 0.
    broker.proc.kill("SIGTERM");
    const code = await broker.exited;
    broker = null;
    if (code !== 0) throw new Error(`the last broker exited with ${code} after SIGTERM`);
    return {
      cycles,
      confirmed: confirmed.size,
      sent,
      lost: lostList.length,
      duplicates,
      unconfirmedDelivered,
      rejected,
      confirmedPerCycle,
      lostSample: lostList.slice(0, 20),
      rejectionCodes: [...rejectionCodes],
      restartMs,
      backlog: { confirmed: kept.size, lost: keptLost },
      delays: nacking.delays,
    };
  } finally {
    publishing = false;
    await publisher.disconnect().catch(() => {});
    await consumer.disconnect().catch(() => {});
    if (broker) await kill9(broker);
    rmSync(root, { recursive: true, force: true });
  }
}

/**
 * Waits until no delivery has arrived for `quietMs` (redeliveries still on their way are counted
 * as duplicates), then compares: confirmed messages never delivered (lost), extra deliveries
 * (duplicates), and deliveries of messages never confirmed.
 */
export async function tally(
  confirmed: Set<number>,
  received: Map<number, number>,
  quietMs: number,
): Promise<{ lost: number[]; duplicates: number; unconfirmedDelivered: number }> {
  let last = -1;
  let total = 0;
  while (total !== last) {
    last = total;
    await Bun.sleep(quietMs);
    total = [...received.values()].reduce((a, b) => a + b, 0);
  }
  const lost = [...confirmed].filter((n) => !received.has(n)).sort((a, b) => a - b);
  let duplicates = 0;
  for (const times of received.values()) duplicates += times - 1;
  const unconfirmedDelivered = [...received.keys()].filter((n) => !confirmed.has(n)).length;
  return { lost, duplicates, unconfirmedDelivered };
}

/**
 * A consume handler that acks every message and counts how often each `message[field]` arrived
 * (what `tally` reads: delivered, and how many times).
 */
export function countingInto(received: Map<number, number>, field: string): ConsumeHandler {
  return (error, message, done) => {
    if (error) return;
    const n = (message as Record<string, number>)[field]!;
    received.set(n, (received.get(n) ?? 0) + 1);
    done();
  };
}

/**
 * A consumer's handler that nacks every tenth message (by its `n`) once, with a delay of `delayMs`,
 * hands every other delivery to `counting`, and counts the nacked ones delivered again before
 * their delay was over (`delays.early`) or with a delivery count of 0 (`delays.uncounted`: the
 * nacked delivery forgotten).
 */
export function nackingOnce(counting: ConsumeHandler, delayMs: number) {
  const nackedAt = new Map<number, number>();
  const delays = {
    early: 0,
    uncounted: 0,
    get nacked() {
      return nackedAt.size;
    },
  };
  const handler: ConsumeHandler = (error, message, done, info) => {
    if (error) return;
    const n = (message as { n: number }).n;
    const at = nackedAt.get(n);
    if (at === undefined && n % 10 === 0) {
      nackedAt.set(n, Date.now());
      return done(false, delayMs / 1000);
    }
    if (at !== undefined && Date.now() < at + delayMs) delays.early++;
    if (at !== undefined && info!.nbRequeues === 0) delays.uncounted++;
    counting(error, message, done, info);
  };
  return { handler, delays };
}

/** Options of the harness' clients: fast reconnects, room for twice the send window offline. */
export function harnessClientOptions(hosts: string[], clientId: string, window: number) {
  return {
    hosts,
    clientId,
    keysDirectory: testKeysDirectory,
    reconnectDelayMs: 10,
    maxReconnectDelayMs: 50,
    maxPendingMessages: window * 2,
  };
}
