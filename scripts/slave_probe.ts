/**
 * CPU probe of a slave's apply path alone (no sockets, no master): a Broker in fsync mode,
 * slave of a cluster, is handed the replication stream's frames as its link to the master hands
 * them (`Upstream`'s target: append, retain, stored, remove), and the probe prints the CPU per
 * message. What it leaves out is the socket and the frame's length prefix; what it keeps is
 * everything the slave's broker does with an entry, its commit and fsync included.
 *
 *   bun scripts/slave_probe.ts [--messages 300000] [--chunk 100] [--lag 2000] [--size 95] [--runs 3]
 *
 * Each chunk (what one socket read brings) holds `chunk` APPENDs, then one REMOVE of the messages
 * appended `lag` entries before (the master's acks trail its appends by its consumers' window).
 * A chunk is acknowledged once its commits end, as the link does.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { decode, encode } from "../src/protocol/cbor.ts";
import { appendFrame, readAppend } from "../src/protocol/hot_ops.ts";
import { FRAME_HEADER_SIZE } from "../src/protocol/frame.ts";
import { OP } from "../src/protocol/mod.ts";
import type { AppendOp } from "../src/protocol/peer_ops.ts";
import { Broker } from "../src/server/broker.ts";
import { parseConfig } from "../src/server/config/config.ts";
import { Logger } from "../src/server/log.ts";
import { SqliteStore } from "../src/server/store/sqlite_store.ts";

const { values: args } = parseArgs({
  options: {
    messages: { type: "string", default: "300000" },
    chunk: { type: "string", default: "100" },
    lag: { type: "string", default: "2000" },
    size: { type: "string", default: "95" },
    runs: { type: "string", default: "3" },
  },
});
/** A positive integer option, or a RangeError naming it. */
function count(name: "messages" | "chunk" | "lag" | "size" | "runs"): number {
  const value = Number(args[name]);
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new RangeError(`--${name} must be a positive integer: ${args[name]}`);
  }
  return value;
}
const MESSAGES = count("messages");
const CHUNK = count("chunk");
const LAG = count("lag");
const SIZE = count("size");
const RUNS = count("runs");
const QUEUE = "probe/v1";

/** The message id of the `n`th send, in the reference client's form (a base-36 counter). */
const idOf = (n: number) => `probe-publisher.${n.toString(36)}`;

/** The stream's frames (CBOR, no length prefix): chunks of APPENDs, each followed by one REMOVE. */
function streamFrames(): Uint8Array[][] {
  const body = new Uint8Array(SIZE).fill(7);
  const created = Date.now();
  const chunks: Uint8Array[][] = [];
  let index = 0;
  for (let first = 0; first < MESSAGES; first += CHUNK) {
    const frames: Uint8Array[] = [];
    const last = Math.min(MESSAGES, first + CHUNK);
    for (let n = first; n < last; n++) {
      const message = { id: idOf(n), queue: QUEUE, destination: "*", body, created, deliveries: 0, deadLetter: null };
      frames.push(appendFrame(++index, message).subarray(FRAME_HEADER_SIZE));
    }
    const acked: string[] = [];
    for (let n = Math.max(0, first - LAG); n < Math.max(0, last - LAG); n++) acked.push(idOf(n));
    if (acked.length > 0) frames.push(encode([OP.REMOVE, ++index, acked]));
    chunks.push(frames);
  }
  return chunks;
}

async function run(chunks: Uint8Array[][]): Promise<{ seconds: number; user: number; system: number }> {
  const directory = mkdtempSync(join(tmpdir(), "kitten-slave-probe-"));
  const logger = new Logger(3);
  const config = parseConfig({
    durability: "fsync",
    isMaster: false,
    dataDirectory: directory,
    cluster: { peers: ["127.0.0.1:9@probe-master"] },
  });
  const store = new SqliteStore({
    directory,
    mode: "fsync",
    commitIntervalMs: config.commitIntervalMs,
    logger,
    indexById: true,
  });
  const broker = new Broker(config, { logger, store });
  broker.recover();
  const target = broker.cluster.upstream.target;
  const started = performance.now();
  const cpu = process.cpuUsage();
  let pending: Promise<unknown> = Promise.resolve();
  for (const frames of chunks) {
    const commits = new Set<Promise<void>>();
    let last = 0;
    for (const frame of frames) {
      const append = readAppend(frame, 0, frame.length);
      if (append !== undefined) {
        const stored = target.append(append as AppendOp, 0);
        if (stored instanceof Promise) commits.add(stored);
        target.retain(append[1], frame);
        last = append[1];
        continue;
      }
      const [, seq, ids] = decode(frame) as [number, number, string[]];
      target.retain(seq, frame);
      target.remove(ids);
      last = seq;
    }
    const acked = last;
    pending = Promise.all([pending, ...commits]).then(() => target.stored(acked));
    // One socket read per event-loop turn.
    await new Promise((resolve) => setImmediate(resolve));
  }
  await pending;
  const used = process.cpuUsage(cpu);
  const seconds = (performance.now() - started) / 1000;
  const { journaled, journalSyncs, inserted, settles } = store.stats;
  console.log(`  store: journaled ${journaled}, fsyncs ${journalSyncs}, rows ${inserted}, settles ${settles}`);
  store.close();
  rmSync(directory, { recursive: true, force: true });
  return { seconds, user: used.user / 1e6, system: used.system / 1e6 };
}

const chunks = streamFrames();
console.log(`slave probe: ${MESSAGES} messages of ${SIZE} B, ${CHUNK} per chunk, removes ${LAG} behind, fsync`);
for (let i = 0; i < RUNS; i++) {
  const { seconds, user, system } = await run(chunks);
  const perMessage = (seconds: number) => ((seconds / MESSAGES) * 1e6).toFixed(2);
  console.log(
    `run ${i + 1}: ${(MESSAGES / seconds).toFixed(0)} msg/s, ${perMessage(user + system)} µs CPU per message ` +
      `(user ${perMessage(user)}, system ${perMessage(system)}; ${seconds.toFixed(2)} s wall)`,
  );
}
