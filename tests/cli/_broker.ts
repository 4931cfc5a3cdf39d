/**
 * A broker subprocess started the way an operator does (`kitten-mq start --config FILE`, ports
 * 0), and `cli(...)`, which runs one `kitten-mq` command against it and collects its output.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";

const MAIN = join(import.meta.dir, "../../src/cli/main.ts");

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `kitten-mq ...args` with no terminal on stdin (as scripts and CI do); `env` is added to this process's. */
export async function cli(args: string[], options: { cwd?: string; stdin?: string; env?: Record<string, string> } = {}): Promise<CliResult> {
  const child = Bun.spawn([process.execPath, MAIN, ...args], {
    cwd: options.cwd,
    stdin: options.stdin === undefined ? "ignore" : new TextEncoder().encode(options.stdin),
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, NO_COLOR: "1", ...options.env },
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

export interface BrokerProcess {
  dir: string;
  configPath: string;
  /** The client port and the admin URL, read from the lines `start` prints. */
  port: number;
  adminUrl: string;
  host: string;
  process: Subprocess;
  output(): string;
  /** The broker's exit code once it exits. */
  exited: Promise<number>;
  /** Rewrites the config file (for reload). */
  writeConfig(input: Record<string, unknown>): void;
  stop(): Promise<void>;
}

export function baseConfig(dir: string): Record<string, unknown> {
  return {
    socketServer: { port: 0 },
    httpServerPort: 0,
    durability: "memory",
    registeredClientsPath: join(dir, "clients"),
    dataDirectory: join(dir, "data"),
    logLevel: 2,
  };
}

export async function startBrokerProcess(overrides: Record<string, unknown> = {}): Promise<BrokerProcess> {
  const dir = mkdtempSync(join(tmpdir(), "kitten-cli-"));
  const configPath = join(dir, "kitten-mq.config.json");
  const writeConfig = (input: Record<string, unknown>) => writeFileSync(configPath, JSON.stringify(input));
  writeConfig({ ...baseConfig(dir), ...overrides });
  const child = Bun.spawn([process.execPath, MAIN, "start", "--config", configPath], { stdout: "pipe", stderr: "pipe" });
  let output = "";
  const drain = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) output += decoder.decode(chunk);
  };
  void drain(child.stdout);
  void drain(child.stderr);
  const deadline = Date.now() + 10_000;
  const admin = /kitten-mq admin on (\S+)/;
  while (!admin.test(output)) {
    if (Date.now() > deadline || child.exitCode !== null) {
      child.kill("SIGKILL");
      throw new Error(`broker did not start:\n${output}`);
    }
    await Bun.sleep(20);
  }
  const port = Number(/kitten-mq listening on [^\s]+:(\d+)/.exec(output)![1]);
  return {
    dir,
    configPath,
    port,
    adminUrl: admin.exec(output)![1]!,
    host: `127.0.0.1:${port}@broker-1`,
    process: child,
    output: () => output,
    exited: child.exited,
    writeConfig,
    async stop() {
      if (child.exitCode === null) child.kill("SIGKILL");
      await child.exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
