/**
 * Scenario (s) of `npm run bench`, scale-out: the plan's arithmetic (queues spread evenly, every
 * client on every group, paced rates, the projection), merging several publishers' reports, and
 * the scenario itself at a tiny size, end to end (real etcd, one broker per group, client
 * processes): every message confirmed and consumed once, figures for each group count, nothing
 * left running or on disk. No timing is asserted: figures only have to be measured.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { mergePublished, type PublisherResult } from "../../src/bench/results.ts";
import {
  checkScaleOut,
  groupBrokerConfig,
  parseGroups,
  placement,
  projection,
  queuesPerPublisher,
  SCALE_OUT_DEFAULTS,
  scaleOutPlan,
  type ScaleOutRun,
  type ScaleOutSettings,
} from "../../src/bench/scale_out.ts";
import { processesMentioning } from "../helpers/bench.ts";
import { TempDirs } from "../helpers/temp_dir.ts";

const temps = new TempDirs("kitten-bench-scale-");
afterAll(temps.removeAll);

const ROOT = join(import.meta.dir, "..", "..");
const SETTINGS: ScaleOutSettings = { ...SCALE_OUT_DEFAULTS, groups: [1, 2, 4], count: 1000, ratePerGroup: 1000 };

describe("scale-out scenario", () => {
  it("queuesPerPublisher() takes the least common multiple of the group counts, and refuses past 64", () => {
    expect(queuesPerPublisher([1, 2, 4])).toBe(4);
    expect(queuesPerPublisher([1, 2, 3])).toBe(6);
    expect(queuesPerPublisher([1])).toBe(1);
    expect(() => queuesPerPublisher([5, 7, 9])).toThrow("315 queues per publisher");
  });

  it("placement() pins queue k on group (k mod N) + 1: an even spread", () => {
    expect(placement(8, 4)).toEqual({
      "q1/v1": { group: "g1" },
      "q2/v1": { group: "g2" },
      "q3/v1": { group: "g3" },
      "q4/v1": { group: "g4" },
      "q5/v1": { group: "g1" },
      "q6/v1": { group: "g2" },
      "q7/v1": { group: "g3" },
      "q8/v1": { group: "g4" },
    });
    const groupsOf = (n: number) => Object.values(placement(8, n)).map((q) => q.group);
    for (const n of [1, 2, 4]) {
      const counts = new Map<string, number>();
      for (const group of groupsOf(n)) counts.set(group, (counts.get(group) ?? 0) + 1);
      expect([...counts.values()]).toEqual(Array(n).fill(8 / n));
    }
  });

  it("groupBrokerConfig() gives each broker its group, the shared etcd and every queue's pin", () => {
    const config = groupBrokerConfig(1, 2, SETTINGS, { endpoint: "http://127.0.0.1:2379", prefix: "p/" });
    expect(config).toEqual({
      serviceId: "g2-1",
      durability: "memory",
      channels: placement(8, 2),
      cluster: { peers: [], minInSyncReplicas: 1, group: "g2", etcd: { endpoints: ["http://127.0.0.1:2379"], prefix: "p/", leaseTtlSeconds: 3 } },
    });
  });

  it("scaleOutPlan() gives publisher p and consumer p the same queues, which cover every group evenly", () => {
    for (const groups of [1, 2, 4]) {
      const plan = scaleOutPlan(SETTINGS, groups, "full", "1");
      const publishers = [plan.publisher, ...plan.morePublishers!];
      expect(publishers).toHaveLength(2);
      expect(plan.receivers).toHaveLength(2);
      const pins = placement(8, groups);
      publishers.forEach((publisher, p) => {
        const channels = publisher.options.channels as string[];
        expect(plan.receivers[p]!.options.channels).toEqual(channels);
        expect(publisher.options).toMatchObject({ count: 500, warmup: 125, window: 2000 });
        expect(plan.receivers[p]!.options).toMatchObject({ count: 500, skip: 125, prefetch: 1000 });
        // 4 queues each (lcm of 1, 2, 4), the same for every N; they fall evenly on the N groups.
        expect(channels).toHaveLength(4);
        const groupsUsed = channels.map((channel) => pins[channel.split("/").slice(0, 2).join("/")]!.group);
        for (let g = 1; g <= groups; g++) expect(groupsUsed.filter((x) => x === `g${g}`)).toHaveLength(4 / groups);
      });
      // No queue is shared by two publishers.
      expect(new Set(publishers.flatMap((p) => p.options.channels as string[])).size).toBe(8);
    }
  });

  it("scaleOutPlan() paced: N × ratePerGroup msg/s in all, split over the publishers", () => {
    const plan = scaleOutPlan({ ...SETTINGS, pacedSeconds: 4, pacedWarmupSeconds: 2 }, 4, "paced", "1");
    // 4 groups × 1,000 msg/s over 2 publishers: 2,000 each, for 2 + 4 s.
    expect(plan.publisher).toMatchObject({ role: "rate", options: { rate: 2000, warmupSeconds: 2, seconds: 4, window: 2000 } });
    // A second of sends may await confirmation: a stall delays them rather than failing them.
    expect(scaleOutPlan({ ...SETTINGS, ratePerGroup: 20_000 }, 4, "paced", "1").publisher.options.window).toBe(40_000);
    expect(plan.receivers[0]!.options).toMatchObject({ count: 12_000, skip: 4000 });
  });

  it("parseGroups() reads counts separated by commas and refuses anything else, quoting it", () => {
    expect(parseGroups("1,2,4")).toEqual([1, 2, 4]);
    expect(parseGroups(" 3 ")).toEqual([3]);
    for (const bad of ["", "1,,2", "1,x", "0", "65", "1.5", "-1"]) {
      expect(() => parseGroups(bad)).toThrow(`--groups must be a list of group counts from 1 to 64: current value is "${bad}"`);
    }
  });

  it("checkScaleOut() refuses bad group counts and rates", () => {
    expect(() => checkScaleOut({ ...SETTINGS, groups: [0, 2] })).toThrow("--groups must be a list of group counts");
    expect(() => checkScaleOut({ ...SETTINGS, groups: [] })).toThrow("--groups must be");
    expect(() => checkScaleOut({ ...SETTINGS, ratePerGroup: 1.5 })).toThrow("--groups-rate must be");
    expect(() => checkScaleOut({ ...SETTINGS, count: 3 })).toThrow("Cannot split 3 messages over 2 publishers");
    expect(() => checkScaleOut(SETTINGS)).not.toThrow();
  });

  it("projection(): N / the baseline's broker CPU per message, and N / its own; ratios against the baseline", () => {
    const base = { groups: 1, full: { brokerUs: 4, clientUs: 6 }, paced: { brokerUs: 8 } };
    const four = { groups: 4, full: { brokerUs: 5, clientUs: 7 }, paced: { brokerUs: 8.4 } };
    expect(projection(four, base)).toEqual({
      estimate: 1_000_000, // 4 × 1 / 4 µs
      conservative: 800_000, // 4 × 1 / 5 µs
      coresWithClients: 10, // 4 × (4 + 6) / 4
      fullVersusBaseline: 1.25,
      pacedVersusBaseline: 1.05,
    });
    expect(projection({ ...four, paced: null }, base).pacedVersusBaseline).toBeNull();
  });

  it("mergePublished() sums counts and CPU, keeps the earliest start and the last confirmation, the worst confirm latency", () => {
    const one = (overrides: Partial<PublisherResult>): PublisherResult => ({
      role: "publisher",
      sent: 100,
      confirmed: 100,
      failed: 0,
      firstError: "",
      firstErrorCode: "",
      firstAt: 1000,
      warmAt: 1100,
      lastSendAt: 1500,
      lastConfirmAt: 1600,
      confirmLatency: { p50: 1, p99: 5 },
      startCpu: { userMs: 10, systemMs: 1 },
      cpu: { userMs: 100, systemMs: 20 },
      ...overrides,
    });
    const merged = mergePublished([
      one({}),
      one({ firstAt: 990, warmAt: 1120, lastConfirmAt: 1650, failed: 2, confirmed: 98, firstError: "TIMEOUT: x", firstErrorCode: "TIMEOUT" }),
    ]);
    expect(merged).toEqual({
      role: "publisher",
      sent: 200,
      confirmed: 198,
      failed: 2,
      firstError: "TIMEOUT: x",
      firstErrorCode: "TIMEOUT",
      firstAt: 990,
      warmAt: 1100,
      lastSendAt: 1500,
      lastConfirmAt: 1650,
      confirmLatency: { p50: 1, p99: 5 },
      startCpu: { userMs: 20, systemMs: 2 },
      cpu: { userMs: 200, systemMs: 40 },
    });
    const single = one({});
    expect(mergePublished([single])).toBe(single);
  });

  it("npm run bench -- --only s at a tiny size: figures for 1 and 2 groups, full and paced, every message confirmed once", async () => {
    const tmp = temps.make();
    const out = join(tmp, "..", `${tmp.split("/").pop()}.json`);
    const bench = Bun.spawn(
      [process.execPath, "scripts/bench.ts", "--only", "s", "--quick", "--groups", "1,2", "--groups-rate", "2000", "--json", out],
      { cwd: ROOT, env: { ...process.env, TMPDIR: tmp }, stdout: "pipe", stderr: "pipe" },
    );
    const [stdout, stderr, code] = await Promise.all([new Response(bench.stdout).text(), new Response(bench.stderr).text(), bench.exited]);
    try {
      // A run that failed says why on stdout (its table's note): shown with the exit code.
      expect({ code, stderr: code === 0 ? "" : stderr, stdout: code === 0 ? "" : stdout.slice(-4000) }).toEqual({ code: 0, stderr: "", stdout: "" });
      // Everything it started (brokers, clients, etcd) named a folder under TMPDIR: all gone.
      expect(readdirSync(tmp)).toEqual([]);
      expect(processesMentioning(tmp)).toEqual([]);
      const report = JSON.parse(readFileSync(out, "utf8"));
      const s = report.scenarios.s;
      expect(s.settings).toMatchObject({ groups: [1, 2], publishers: 2, queues: 4, queuesPerGroup: [4, 2], durability: "memory", ratePerGroup: 2000 });
      expect(s.baseline).toBe(1);
      expect(s.groups.map((g: { groups: number }) => g.groups)).toEqual([1, 2]);
      for (const entry of s.groups) {
        expect(entry.full.failedRuns).toEqual([]);
        expect(entry.paced.failedRuns).toEqual([]);
        // --quick: 20,000 messages at full speed; paced: N × 2,000 msg/s for 0.5 + 1 s.
        expectMeasured(entry.full.median, entry.groups, 20_000);
        expectMeasured(entry.paced.median, entry.groups, entry.groups * 2000 * 1.5);
        expect(entry.projection.estimate).toBeGreaterThan(0);
        expect(entry.projection.conservative).toBeGreaterThan(0);
        expect(entry.projection.coresWithClients).toBeGreaterThan(entry.groups);
      }
      expect(s.groups[0].projection).toMatchObject({ fullVersusBaseline: 1, pacedVersusBaseline: 1 });
      expect(stdout).toMatch(/^ {4}1 group: [\d,]+ confirmed msg\/s; broker CPU per message at full speed [\d.]+ µs \(1\.00×\); paced/m);
      expect(stdout).toMatch(/^ {4}2 groups: [\d,]+ confirmed msg\/s; broker CPU per message at full speed [\d.]+ µs \([\d.]+×\); paced/m);
      expect(stdout).toMatch(/projected on a host with enough cores: [\d,]+ msg\/s \(2 × 1 \/ the broker µs per message of 1 group/);
      expect(stdout).toMatch(/^ {2}s: no target: reported \(1: [\d,]+ msg\/s, broker [\d.]+ µs\/msg \(paced [\d.]+\); 2: /m);
    } finally {
      await Bun.file(out).delete().catch(() => {});
    }
  }, 120_000);

  it("npm run bench refuses a bad --groups before starting anything", async () => {
    const bench = Bun.spawn([process.execPath, "scripts/bench.ts", "--only", "s", "--groups", "1,x"], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    const [stderr, code] = await Promise.all([new Response(bench.stderr).text(), bench.exited]);
    expect(code).toBe(1);
    expect(stderr).toContain(`--groups must be a list of group counts from 1 to 64: current value is "1,x"`);
  });
});

/** A median that counts every message once, with each figure measured (not NaN, not 0 where work was done). */
function expectMeasured(m: ScaleOutRun, groups: number, messages: number): void {
  expect(m.groups).toBe(groups);
  expect({ sent: m.sent, confirmed: m.confirmed, received: m.received, duplicates: m.duplicates }).toEqual({
    sent: messages,
    confirmed: messages,
    received: messages,
    duplicates: 0,
  });
  expect(m.confirmedPerSecond).toBeGreaterThan(0);
  expect(m.consumedPerSecond).toBeGreaterThan(0);
  expect(m.brokerUs).toBeGreaterThan(0);
  expect(m.clientUs).toBeGreaterThan(0);
  expect(m.clientUs).toBeCloseTo(m.publisherUs + m.consumerUs, 0);
  expect(m.brokerUsWholeRun).toBeGreaterThan(0);
  expect(m.brokerCores).toHaveLength(groups);
  for (const cores of m.brokerCores) expect(cores).toBeGreaterThanOrEqual(0);
  expect(m.etcdMs).toBeGreaterThanOrEqual(0);
  expect(m.p99).toBeGreaterThan(0);
}
