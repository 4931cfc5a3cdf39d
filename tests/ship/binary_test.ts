/**
 * The compiled executable (`KITTEN_BIN`, or compiled once here), run from a folder with no
 * node_modules: it prints its versions, starts a broker the real client talks to, serves the
 * embedded dashboard, handles the signals the systemd unit relies on, and benchmarks itself.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { client } from "../../mod.ts";
import { dashboardPage } from "../../src/admin/dashboard.ts";
import { PROTOCOL_VERSION, STORE_VERSION, VERSION } from "../../src/version.ts";
import { expectBenchReport, processesMentioning } from "../helpers/bench.ts";
import { cleanupAll, clientRoundTrip, isolatedCopy, run, shipBinary, startBinaryBroker, tempDir } from "./helpers.ts";

let bin = "";
let dir = "";

beforeAll(async () => {
  ({ bin, dir } = isolatedCopy(await shipBinary()));
}, 60_000);

afterAll(cleanupAll);

describe("ship: the compiled binary", () => {
  test("--version prints the version, protocol version and store version", async () => {
    const result = await run([bin, "--version"], { cwd: dir });
    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe(`kitten-mq ${VERSION} (protocol ${PROTOCOL_VERSION}, store ${STORE_VERSION})`);
  });

  test("--help lists the commands; an unknown command exits 2", async () => {
    const help = await run([bin, "--help"], { cwd: dir });
    expect(help.code).toBe(0);
    for (const command of ["start", "status", "reload", "soft-stop", "init-conf", "bench"]) expect(help.stdout).toContain(`kitten-mq ${command}`);
    const unknown = await run([bin, "frobnicate"], { cwd: dir });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown command "frobnicate"');
  });

  test("init-conf writes a valid default config and refuses to overwrite it", async () => {
    const work = tempDir();
    const path = join(work, "kitten-mq.config.json");
    expect((await run([bin, "init-conf", path], { cwd: work })).code).toBe(0);
    const config = JSON.parse(readFileSync(path, "utf8"));
    expect(config.socketServer.port).toBe(1234);
    expect(config.httpServerPort).toBe(8080);
    const again = await run([bin, "init-conf", path], { cwd: work });
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("--force");
  });

  test(
    "starts from a folder with no node_modules; the client sends, consumes and acks; GET / is the dashboard",
    async () => {
      const work = tempDir();
      const configPath = join(work, "kitten-mq.config.json");
      // Relative paths: resolved against the config's folder (the durable store exercises bun:sqlite).
      writeFileSync(configPath, JSON.stringify({ socketServer: { port: 0 }, httpServerPort: 0, durability: "fsync" }));
      const broker = await startBinaryBroker(bin, configPath, dir);
      expect(broker.port).toBeGreaterThan(0);

      const received = await clientRoundTrip(broker, tempDir("kitten-ship-keys-"), 5);
      expect(received).toHaveLength(5);
      expect(received.map((m) => (m as { n: number }).n).sort()).toEqual([0, 1, 2, 3, 4]);
      expect(existsSync(join(work, "kitten-mq-data"))).toBe(true);

      const page = await fetch(`${broker.adminUrl}/`);
      expect(page.status).toBe(200);
      expect(page.headers.get("content-type")).toContain("text/html");
      const html = await page.text();
      expect(html).toContain("<title>Kitten-MQ</title>");
      expect(html).toBe(dashboardPage(5000));

      // The CLI finds the running broker through the config (as an operator on the host does).
      const status = await run([bin, "status", "--config", configPath, "--json"], { cwd: work });
      expect(status.code).toBe(0);
      expect(JSON.parse(status.stdout)).toMatchObject({ role: "master", stopping: false, serviceId: expect.any(String) });

      // ExecReload= sends SIGUSR2: the broker re-reads its file and keeps running.
      broker.process.kill("SIGUSR2");
      await broker.waitForOutput("reloaded");
      expect(broker.process.exitCode).toBeNull();

      // systemd stops with SIGTERM: a clean exit (0), so Restart=on-failure leaves it stopped.
      expect(await broker.stop()).toBe(0);
      expect(broker.output()).toContain("stopped");
    },
    30_000,
  );

  test(
    "bench --json starts a broker and workers from the binary alone (no Bun on PATH) and leaves nothing behind",
    async () => {
      const tmp = tempDir();
      const result = await run([bin, "bench", "--count", "2000", "--listeners", "2", "--json"], {
        cwd: dir,
        env: { TMPDIR: tmp, PATH: "/nonexistent" },
      });
      expect(result.code).toBe(0);
      expectBenchReport(JSON.parse(result.stdout), { count: 2000, listeners: 2, scenarios: ["work", "fanout", "latency"], startedByBench: true });
      expect(readdirSync(tmp)).toEqual([]);
      expect(processesMentioning(tmp)).toEqual([]);
    },
    60_000,
  );

  test(
    "a durable message sent before a stop is delivered after the restart (bun:sqlite inside the binary)",
    async () => {
      const work = tempDir();
      const configPath = join(work, "kitten-mq.config.json");
      writeFileSync(configPath, JSON.stringify({ socketServer: { port: 0 }, httpServerPort: 0, durability: "fsync" }));
      const keys = tempDir("kitten-ship-keys-");

      const first = await startBinaryBroker(bin, configPath, work);
      const sender = client();
      try {
        await sender.connect({ hosts: [first.host], clientId: "ship-sender", keysDirectory: keys });
        await sender.send("durable/v1/1", { kept: true }); // confirmed once on disk
      } finally {
        await sender.disconnect().catch(() => {});
      }
      expect(await first.stop()).toBe(0);

      const second = await startBinaryBroker(bin, configPath, work);
      const consumer = client();
      try {
        await consumer.connect({ hosts: [second.host], clientId: "ship-consumer", keysDirectory: keys });
        const got = await new Promise<unknown>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`nothing delivered after the restart:\n${second.output()}`)), 10_000);
          consumer.consume("durable/v1/*", (error, message, done) => {
            if (error) return reject(error);
            done();
            clearTimeout(timer);
            resolve(message);
          });
        });
        expect(got).toEqual({ kept: true });
      } finally {
        await consumer.disconnect().catch(() => {});
      }
      expect(await second.stop()).toBe(0);
    },
    30_000,
  );
});
