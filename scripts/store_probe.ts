/**
 * Throughput probe of the durable store alone (no broker, no sockets):
 *
 *   bun scripts/store_probe.ts [--messages 200000] [--window 5000] [--chunk 500] [--size 100]
 *                              [--mode fsync|batch] [--directory DIR] [--strace]
 *
 * 1. Appends `messages` bodies of `size` bytes, `chunk` per event-loop turn (what one turn of
 *    socket reads might bring), at most `window` unconfirmed at any time, and prints messages/s,
 *    commits/s and fsyncs/s. 2. Removes them all (acks) and prints the same. 3. Times 50
 *    transactions of exactly 1000 appends (the event loop is blocked that long per commit).
 *
 * fsyncs/s: WAL mode with synchronous=FULL syncs the WAL once per commit, and each checkpoint
 * (every ~4 MB of WAL) syncs the WAL and the database file once more. With `--strace` the probe
 * runs itself under `strace -f --seccomp-bpf -c -e trace=fsync,fdatasync` and prints the counted calls.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Logger } from "../src/server/log.ts";
import { SqliteStore } from "../src/server/store/sqlite_store.ts";
import type { StoredMessage } from "../src/server/store/store.ts";

const { values: args } = parseArgs({
  options: {
    messages: { type: "string", default: "200000" },
    window: { type: "string", default: "5000" },
    chunk: { type: "string", default: "500" },
    size: { type: "string", default: "100" },
    mode: { type: "string", default: "fsync" },
    directory: { type: "string" },
    strace: { type: "boolean", default: false },
  },
});

if (args.strace) {
  const output = join(mkdtempSync(join(tmpdir(), "kitten-probe-strace-")), "strace.txt");
  const forwarded = process.argv.slice(2).filter((arg) => arg !== "--strace");
  const run = spawnSync(
    "strace",
    ["-f", "--seccomp-bpf", "-c", "-e", "trace=fsync,fdatasync", "-o", output, process.execPath, import.meta.path, ...forwarded],
    { stdio: "inherit" },
  );
  if (run.error) throw run.error;
  const summary = readFileSync(output, "utf8");
  rmSync(join(output, ".."), { recursive: true, force: true });
  // Columns: % time, seconds, usecs/call, calls, [errors], syscall.
  const count = (name: string) => {
    const columns = summary.split("\n").map((line) => line.trim().split(/\s+/)).find((columns) => columns.at(-1) === name);
    return Number(columns?.[3] ?? 0);
  };
  console.log(`strace: fsync calls ${count("fsync")}, fdatasync calls ${count("fdatasync")} (whole run, all phases)`);
  process.exit(run.status ?? 1);
}

const total = Number(args.messages);
const window = Number(args.window);
const chunk = Number(args.chunk);
const size = Number(args.size);
const mode = args.mode === "batch" ? "batch" : "fsync";
const directory = args.directory ?? mkdtempSync(join(tmpdir(), "kitten-probe-"));
const store = new SqliteStore({ directory, mode, logger: new Logger(3) });
const body = new Uint8Array(size).fill(97);
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

function report(label: string, count: number, seconds: number, commits: number, commitMs: number): void {
  const perSecond = (n: number) => Math.round(n / seconds).toLocaleString("en-US");
  console.log(
    `${label}: ${count.toLocaleString("en-US")} in ${seconds.toFixed(2)} s = ${perSecond(count)} msg/s; ` +
      `commits ${commits} (${perSecond(commits)}/s, ${Math.round(count / Math.max(commits, 1))} per commit); ` +
      `fsyncs ≈ ${perSecond(commits)}/s (one per commit, plus checkpoints); ` +
      `event loop blocked by commits ${((commitMs / 1000 / seconds) * 100).toFixed(0)}% of the time`,
  );
}

console.log(`store probe: ${mode} mode, ${total} messages of ${size} B, window ${window}, ${chunk} per turn, in ${directory}`);

// 1. Appends.
const messages: StoredMessage[] = [];
let outstanding = 0;
let sent = 0;
let before = { ...store.stats };
let started = performance.now();
while (sent < total) {
  const count = Math.min(chunk, window - outstanding, total - sent);
  if (count > 0) {
    let stored: void | Promise<void>;
    for (let i = 0; i < count; i++) {
      const message = { id: `probe.${sent++}`, queue: "probe/v1", destination: "*", body, created: Date.now() };
      messages.push(message);
      stored = store.append(message);
    }
    outstanding += count;
    if (stored! instanceof Promise) stored.then(() => (outstanding -= count));
    else outstanding -= count;
  }
  await turn();
}
while (outstanding > 0) await turn();
let seconds = (performance.now() - started) / 1000;
report("append", total, seconds, store.stats.commits - before.commits, store.stats.commitMs - before.commitMs);
console.log(`  largest transaction ${store.stats.largestBatch} appends; slowest commit ${store.stats.maxCommitMs.toFixed(1)} ms`);

// 2. Removes (acks), `chunk` per turn; a commit every commitIntervalMs or with the next appends.
before = { ...store.stats };
started = performance.now();
for (let i = 0; i < messages.length; i += chunk) {
  for (const message of messages.slice(i, i + chunk)) store.remove(message);
  await turn();
}
while (store.pending > 0) await Bun.sleep(1);
seconds = (performance.now() - started) / 1000;
report("remove", total, seconds, store.stats.commits - before.commits, store.stats.commitMs - before.commitMs);

// 3. Transactions of exactly 1000 appends.
const durations: number[] = [];
for (let round = 0; round < 50; round++) {
  let stored: void | Promise<void>;
  for (let i = 0; i < 1000; i++) stored = store.append({ id: `t.${round}.${i}`, queue: "probe/v1", destination: "*", body, created: 0 });
  if (stored! instanceof Promise) await stored;
  else while (store.pending > 0) await Bun.sleep(1);
  durations.push(store.stats.lastCommitMs);
}
durations.sort((a, b) => a - b);
const at = (q: number) => durations[Math.min(durations.length - 1, Math.floor(q * durations.length))]!.toFixed(2);
console.log(`1000-message transaction (insert + commit + fsync): p50 ${at(0.5)} ms, p90 ${at(0.9)} ms, max ${at(1)} ms`);

store.close();
if (!args.directory) rmSync(directory, { recursive: true, force: true });
