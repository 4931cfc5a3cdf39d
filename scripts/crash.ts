/**
 * The long kill -9 crash test: `bun scripts/crash.ts --cycles 20 --seed 1`.
 *
 * A broker process in fsync mode is killed with SIGKILL at random (seeded) moments while a
 * client publishes with confirms, and restarted on the same port and data directory; at the end
 * everything is consumed. Every confirmed message must arrive at least once. The last line is
 * `kill-9 cycles: N, confirmed: N, lost: N, duplicates: N`; the exit code is 1 when lost > 0.
 *
 * Options: --cycles N (20), --seed N (1), --min-run-ms / --max-run-ms (time between kills,
 * 150..600), --window N (sends in flight, 200), --live-consumer (also consume and ack during the
 * cycles, so acks are lost by the kills too and redeliveries show up as duplicates), --backlog N
 * (N messages stored first in a queue nobody consumes until the end: every restart happens with
 * them on disk; the last lines give the restart times and the backlog's count), --nack-delay-ms D
 * (with --live-consumer: every tenth message is nacked once with a delay of D ms; a line counts
 * those delivered again before their delay was over, which a kill must not cause).
 */
import { parseArgs } from "node:util";
import { runCrashTest } from "../tests/helpers/crash.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    cycles: { type: "string", default: "20" },
    seed: { type: "string", default: "1" },
    "min-run-ms": { type: "string", default: "150" },
    "max-run-ms": { type: "string", default: "600" },
    window: { type: "string", default: "200" },
    "live-consumer": { type: "boolean", default: false },
    backlog: { type: "string", default: "0" },
    "nack-delay-ms": { type: "string", default: "0" },
  },
});

const int = (name: keyof typeof values, min: number): number => {
  const value = Number(values[name]);
  if (!Number.isSafeInteger(value) || value < min) {
    console.error(`crash: --${name} must be an integer >= ${min} (got ${values[name]})`);
    process.exit(2);
  }
  return value;
};

const cycles = int("cycles", 1);
const nackDelayMs = int("nack-delay-ms", 0);
if (nackDelayMs > 0 && !values["live-consumer"]) {
  console.error("crash: --nack-delay-ms needs --live-consumer (the consumer nacks during the cycles)");
  process.exit(2);
}
const seed = int("seed", 0);
const started = performance.now();
const result = await runCrashTest({
  cycles,
  seed,
  minRunMs: int("min-run-ms", 0),
  maxRunMs: int("max-run-ms", 1),
  window: int("window", 1),
  liveConsumer: values["live-consumer"],
  backlog: int("backlog", 0),
  nackDelayMs,
  log: (line) => console.log(line),
});
console.log(
  `sent: ${result.sent}, rejected: ${result.rejected}${result.rejectionCodes.length ? ` (${result.rejectionCodes.join(", ")})` : ""}, ` +
    `delivered but never confirmed: ${result.unconfirmedDelivered}, seed: ${seed}, ` +
    `${((performance.now() - started) / 1000).toFixed(1)} s`,
);
if (result.restartMs.length > 0) {
  const sorted = [...result.restartMs].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  console.log(`restart (spawn → listening) with ${result.backlog.confirmed} messages kept: p50 ${at(0.5)} ms, max ${sorted.at(-1)} ms`);
}
if (result.backlog.confirmed > 0) console.log(`backlog: ${result.backlog.confirmed} confirmed, ${result.backlog.lost} lost`);
if (nackDelayMs > 0) {
  console.log(
    `delays: ${result.delays.nacked} messages nacked with ${nackDelayMs} ms, ${result.delays.early} delivered again before it was over, ` +
      `${result.delays.uncounted} with nbRequeues 0 (a nack still on its way, or not yet committed, when the broker was killed)`,
  );
}
if (result.lost > 0) console.log(`lost (first ${result.lostSample.length}): ${result.lostSample.join(", ")}`);
console.log(
  `kill-9 cycles: ${result.cycles}, confirmed: ${result.confirmed + result.backlog.confirmed}, ` +
    `lost: ${result.lost + result.backlog.lost}, duplicates: ${result.duplicates}`,
);
process.exit(result.lost > 0 || result.backlog.lost > 0 ? 1 : 0);
