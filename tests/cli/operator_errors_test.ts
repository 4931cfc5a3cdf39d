import { afterEach, expect, it } from "bun:test";
import { createServer, type Server } from "node:net";
import { join } from "node:path";
import { Cleanup } from "../helpers/broker.ts";
import { TempDirs } from "../helpers/temp_dir.ts";
import { baseConfig, type BrokerProcess, cli, startBrokerProcess } from "./_broker.ts";
import { writeFileSync } from "node:fs";

const cleanup = new Cleanup();
afterEach(cleanup.run);

async function started(overrides: Record<string, unknown> = {}): Promise<BrokerProcess> {
  const broker = await startBrokerProcess(overrides);
  cleanup.defer(() => broker.stop());
  return broker;
}

it("cli: status, list and reload refuse a --config file that does not exist", async () => {
  const broker = await started(); // a broker on the defaults' state must not answer for a typo
  for (const command of [["status"], ["list"], ["reload"]]) {
    const missing = join(broker.dir, "nonexist.json");
    const result = await cli([...command, "--config", missing]);
    expect({ command, code: result.code }).toEqual({ command, code: 1 });
    expect(result.stderr.trim()).toBe(`kitten-mq: Cannot use --config "${missing}": file not found`);
    expect(result.stdout).toBe("");
  }
});

it("cli: start on a client port in use prints one line naming host and port, exit 1", async () => {
  const busy: Server = createServer();
  await new Promise<void>((resolve) => busy.listen(0, "127.0.0.1", resolve));
  cleanup.defer(() => new Promise((resolve) => busy.close(resolve)));
  const port = (busy.address() as { port: number }).port;
  const dirs = new TempDirs();
  cleanup.defer(() => dirs.removeAll());
  const dir = dirs.make("kitten-busy-");
  const configPath = join(dir, "kitten-mq.config.json");
  writeFileSync(configPath, JSON.stringify({ ...baseConfig(dir), socketServer: { port } }));
  const result = await cli(["start", "--config", configPath]);
  expect(result.code).toBe(1);
  const errors = result.stderr.trim().split("\n");
  expect(errors).toEqual([
    `kitten-mq: CONFIG_INVALID: Cannot listen for clients on 127.0.0.1:${port} (socketServer.host, socketServer.port): ` +
    "the port is in use (another process listens there)",
  ]);
});

it("cli: a broker reachable from other hosts with no token and no rules warns at start and in GET /status", async () => {
  const open = await started({ socketServer: { port: 0, host: "0.0.0.0" } });
  const warning = open.output().split("\n").find((line) => line.includes("[security"));
  expect(warning).toContain("no socketServer.token and no rules");
  expect(warning).toContain("0.0.0.0");
  const status = await (await fetch(`${open.adminUrl}/status`)).json() as { warnings: string[] };
  expect(status.warnings).toHaveLength(1);
  expect(status.warnings[0]).toContain("0.0.0.0");

  const guarded = await started({ socketServer: { port: 0, host: "0.0.0.0", token: "s3cret" } });
  expect(guarded.output()).not.toContain("[security");
  expect((await (await fetch(`${guarded.adminUrl}/status`)).json() as { warnings: string[] }).warnings).toEqual([]);
});
