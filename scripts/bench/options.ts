/**
 * The options of `npm run bench` (scripts/bench.ts), read from its command line when imported:
 * `--help` prints the usage and exits; a bad value throws a RangeError naming the option.
 */
import { parseArgs } from "node:util";
import { bodyFor, smallestBody } from "../../src/bench/scenarios.ts";
import { checkScaleOut, parseGroups, SCALE_OUT_DEFAULTS, type ScaleOutSettings } from "../../src/bench/scale_out.ts";

export const { values: args } = parseArgs({
  args: process.argv.slice(2),
  options: {
    quick: { type: "boolean", default: false },
    runs: { type: "string" },
    only: { type: "string" },
    timeout: { type: "string" },
    json: { type: "string" },
    profile: { type: "string" },
    "backlog-count": { type: "string" },
    window: { type: "string" },
    size: { type: "string" },
    groups: { type: "string" },
    "groups-durability": { type: "string" },
    "groups-rate": { type: "string" },
    help: { type: "boolean", short: "h", default: false },
  },
});
if (args.help) {
  console.log(
    "usage: bun scripts/bench.ts [--quick] [--runs N] [--only a,b,c] [--timeout S] [--json FILE] [--profile DIR]\n" +
      "                            [--window N] [--size BYTES] [--backlog-count N] [--groups 1,2,4] [--groups-durability memory|fsync] [--groups-rate MSG/S]",
  );
  process.exit(0);
}
export const QUICK = args.quick;
export const RUNS = args.runs ? Number(args.runs) : QUICK ? 1 : 3;
export const ONLY = new Set((args.only ?? "a,a-node,f,f2,f3,b,c,c3,d,e,s,g").split(",").map((s) => s.trim()));
export const BACKLOG_COUNT = args["backlog-count"] ? Number(args["backlog-count"]) : QUICK ? 200_000 : 20_000_000;
if (!Number.isSafeInteger(BACKLOG_COUNT) || BACKLOG_COUNT < 1) throw new RangeError(`--backlog-count must be a positive integer: ${args["backlog-count"]}`);
const GROUPS_DURABILITY = args["groups-durability"] ?? SCALE_OUT_DEFAULTS.durability;
if (GROUPS_DURABILITY !== "memory" && GROUPS_DURABILITY !== "fsync") {
  throw new RangeError(`--groups-durability must be memory or fsync: current value is "${GROUPS_DURABILITY}"`);
}
export const SIZES = QUICK
  ? { a: 20_000, b: 10_000, rate: 5_000, seconds: 2, warmup: 0.5 }
  : { a: 300_000, b: 300_000, rate: 5_000, seconds: 10, warmup: 10 };
/** (c3)'s rate: well under the cluster's throughput, so a send's latency is its commits' and replication's, not a queue's. */
export const REPLICATED_RATE = 1_000;
/*
 * Figures are taken at steady state: the first quarter of the messages of (a), (b), (d)–(f) is
 * warm-up (WARMUP_SHARE: JIT compilation of three to six processes sharing two cores), left out
 * of the rate and the latency. (c) sends for 10 s before it measures for 10 s: at 5,000 msg/s the
 * JIT keeps compiling hot functions for several seconds (1–11 ms per compile, on the same two
 * cores), and latency measured during that is the start-up's, not the broker's. The note column
 * gives the figures over the whole run too.
 */
/** Per run: past it the broker and clients are killed and the run is reported as failed. */
export const TIMEOUT_MS = (args.timeout ? Number(args.timeout) : QUICK ? 30 : 60) * 1000;
/** Unconfirmed sends a publisher keeps at most (a, b, d-f3, s). */
export const WINDOW = args.window ? Number(args.window) : 2000;
if (!Number.isSafeInteger(WINDOW) || WINDOW < 1) throw new RangeError(`--window must be a positive integer: ${args.window}`);
if (args.size !== undefined && !(Number.isSafeInteger(Number(args.size)) && Number(args.size) >= smallestBody())) {
  throw new RangeError(`--size must be an integer of at least ${smallestBody()} bytes: ${args.size}`);
}
/** The publishers' bodies with `--size`: `{seq, t, pad}` of that many bytes of CBOR (a, b, e-f3); else payload()'s. */
export const BODY = args.size === undefined ? null : bodyFor(Number(args.size), SIZES.a);
export const PAD = BODY ? { pad: BODY.pad } : {};
export const PREFETCH = 1000;
export const LISTENERS = 4;
/** Scenario (s): as many messages per full-speed run as (a), over every publisher. */
const GROUPS_RATE = args["groups-rate"] === undefined ? SCALE_OUT_DEFAULTS.ratePerGroup : Number(args["groups-rate"]);
export const SCALE_OUT: ScaleOutSettings = {
  ...SCALE_OUT_DEFAULTS,
  groups: args.groups ? parseGroups(args.groups) : [...SCALE_OUT_DEFAULTS.groups],
  count: SIZES.a,
  window: WINDOW,
  prefetch: PREFETCH,
  durability: GROUPS_DURABILITY,
  ratePerGroup: GROUPS_RATE === 0 ? null : GROUPS_RATE,
  ...(QUICK ? { pacedSeconds: 1, pacedWarmupSeconds: 0.5 } : {}),
};
checkScaleOut(SCALE_OUT);
if (!Number.isSafeInteger(RUNS) || RUNS < 1) throw new RangeError(`--runs must be a positive integer: ${args.runs}`);
if (!(TIMEOUT_MS > 0)) throw new RangeError(`--timeout must be a number of seconds > 0: ${args.timeout}`);

