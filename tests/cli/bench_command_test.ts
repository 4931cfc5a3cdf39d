/**
 * `kitten-mq bench` from the sources: against a broker it starts itself and against one the test
 * runs (--host), with small counts; an unreachable --host and bad options; Ctrl-C. Each run gets
 * its own TMPDIR, so the test can check that bench removed every temp folder it made and that
 * no process it started (they all name that folder on their command line) is left.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import type { BenchReport } from "../../src/bench/mod.ts";
import { startTestBroker, waitFor } from "../helpers/broker.ts";
import { expectBenchReport, processesMentioning } from "../helpers/bench.ts";
import { freePort } from "../helpers/ports.ts";
import { TempDirs } from "../helpers/temp_dir.ts";
import { cli } from "./_broker.ts";

const temps = new TempDirs("kitten-bench-cli-");
afterAll(temps.removeAll);

const MAIN = join(import.meta.dir, "../../src/cli/main.ts");

/** `kitten-mq bench ...args` with a TMPDIR of its own; resolves with its output once it has exited and the folder is checked. */
async function bench(args: string[]) {
  const tmp = temps.make();
  const result = await cli(["bench", ...args], { env: { TMPDIR: tmp } });
  expect(readdirSync(tmp)).toEqual([]);
  expect(processesMentioning(tmp)).toEqual([]);
  return result;
}

describe("kitten-mq bench", () => {
  it("bench --json starts its own broker, runs every scenario and reports measured figures", async () => {
    const result = await bench(["--count", "2000", "--listeners", "2", "--json"]);
    expect(result.code).toBe(0);
    const report = JSON.parse(result.stdout) as BenchReport;
    expectBenchReport(report, { count: 2000, listeners: 2, scenarios: ["work", "fanout", "latency"], startedByBench: true });
    expect(report.broker.durability).toBe("memory");
    expect(report.broker.hosts[0]).toMatch(/^127\.0\.0\.1:\d+@broker-1$/);
  }, 60_000);

  it("bench --host measures a broker it did not start, does not claim its CPU, and says when the broker caps the consumer's prefetch", async () => {
    const broker = startTestBroker({ durability: "memory" }); // prefetch 1, the default
    try {
      const result = await bench(["work", "--scenario", "latency", "--host", broker.host, "--count", "2000", "--json"]);
      expect(result.code).toBe(0);
      const report = JSON.parse(result.stdout) as BenchReport;
      expectBenchReport(report, { count: 2000, listeners: 4, scenarios: ["work", "latency"], startedByBench: false, grantedConsumer: 1 });
      expect(report.broker).toEqual({ hosts: [broker.host], startedByBench: false, durability: null, cpuMeasured: false });
      // The table says so instead of a number.
      const table = await bench(["work", "--host", broker.host, "--count", "2000"]);
      expect(table.code).toBe(0);
      expect(table.stdout).toMatch(/^cpu µs\/msg broker +not measured \(remote broker\)$/m);
      expect(table.stdout).toMatch(/^msg\/s, steady state +[\d,]+$/m);
      expect(table.stdout).toContain(
        "the broker granted each consumer a prefetch of 1 (asked 1,000): its `prefetch` setting caps it, so a consumer holds one delivery until its ack reaches the broker",
      );
      // Asking no more than the broker grants: nothing to say.
      const asked = await bench(["work", "--host", broker.host, "--count", "2000", "--prefetch", "1", "--json"]);
      expect(asked.code).toBe(0);
      const askedReport = JSON.parse(asked.stdout) as BenchReport;
      expect(askedReport.settings.prefetch).toBe(1);
      expect(askedReport.scenarios[0]!.prefetch).toEqual({ asked: 1, granted: 1 });
    } finally {
      await broker.stop();
    }
  }, 60_000);

  it("bench --host with nothing listening exits 1 with UNREACHABLE", async () => {
    const host = `127.0.0.1:${await freePort()}`;
    const json = await bench(["--host", host, "--json"]);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout)).toEqual({
      code: "UNREACHABLE",
      message: `Cannot reach a broker on ${host} (ECONNREFUSED): is it running, and is --host right?`,
    });
    const text = await bench(["--host", host]);
    expect(text.code).toBe(1);
    expect(text.stderr).toBe(`kitten-mq: Cannot reach a broker on ${host} (ECONNREFUSED): is it running, and is --host right?\n`);
  });

  it("bench names the broker's refusal with its code, exit 1: a client no rule knows, a send no rule allows", async () => {
    const strangers = startTestBroker({ durability: "memory", rules: [{ client: "someone", read: ["x/*"], write: ["x/*"] }] });
    const readOnly = startTestBroker({ durability: "memory", rules: [{ client: "kitten-mq-bench-*", read: ["bench/*"] }] });
    try {
      const unknown = await bench(["work", "--host", strangers.host, "--count", "100", "--json"]);
      expect(unknown.code).toBe(1);
      expect(JSON.parse(unknown.stdout)).toMatchObject({ code: "UNKNOWN_CLIENT", message: expect.stringContaining("no rule's client matches") });
      const refused = await bench(["work", "--host", readOnly.host, "--count", "100"]);
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(/^kitten-mq: NOT_ALLOWED: 100 of 100 sends failed, the first with NOT_ALLOWED: Cannot send to "bench\/v1\/work-/m);
    } finally {
      await strangers.stop();
      await readOnly.stop();
    }
  }, 60_000);

  it("bench refuses bad options with USAGE, exit code 2, before starting anything", async () => {
    const cases: [string[], string][] = [
      [["--count", "5"], `--count must be a whole number from 10 to 100,000,000: current value is "5"`],
      [["--size", "many"], `--size must be a whole number from 28 to 1,000,000: current value is "many"`],
      [["--prefetch", "0"], `--prefetch must be a whole number from 1 to 65,535: current value is "0"`],
      [["--durability", "disk"], `--durability must be "memory" or "fsync": current value is "disk"`],
      [["--host", "127.0.0.1:1", "--durability", "fsync"], "--durability applies to the broker bench starts: with --host, the brokers' own config decides"],
      [["--host", "localhost"], `--host "localhost" must look like HOST:PORT[@SERVICE_ID#TOKEN], with a port from 1 to 65535`],
      [["fanuot"], `unknown scenario "fanuot" (work, fanout, latency or all): did you mean "fanout"?`],
      [["--channel", "bench"], `Cannot use --channel "bench": must be "endpoint/version"`],
    ];
    for (const [args, message] of cases) {
      const result = await bench([...args, "--json"]);
      expect(result.code).toBe(2);
      expect(JSON.parse(result.stdout)).toEqual({ code: "USAGE", message });
    }
  });

  it("bench stops its broker and workers and removes its temp folders on Ctrl-C (SIGINT)", async () => {
    const tmp = temps.make();
    const child = Bun.spawn([process.execPath, MAIN, "bench", "work", "--count", "1000000"], {
      env: { ...process.env, TMPDIR: tmp },
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
    });
    try {
      let stderr = "";
      const drained = (async () => {
        const decoder = new TextDecoder();
        for await (const chunk of child.stderr) stderr += decoder.decode(chunk, { stream: true });
      })();
      // Interrupted while the scenario runs: its broker, its consumer and its publisher are up.
      await waitFor(() => processesMentioning(tmp).length >= 3, 20_000, "the broker and two workers of bench");
      child.kill("SIGINT");
      expect(await child.exited).toBe(130);
      await drained;
      expect(stderr).toContain("kitten-mq bench: interrupted");
      expect(readdirSync(tmp)).toEqual([]);
      expect(processesMentioning(tmp)).toEqual([]);
    } finally {
      // A failed check must not leave a run going: bench cleans up on SIGINT; whatever is still
      // there after that (started by the bench this test started) goes by its pid.
      if (child.exitCode === null) {
        child.kill("SIGINT");
        await Promise.race([child.exited, Bun.sleep(10_000)]);
      }
      for (const pid of processesMentioning(tmp)) process.kill(pid, "SIGKILL");
      if (child.exitCode === null) child.kill("SIGKILL");
    }
  }, 60_000);
});
