/**
 * Helpers of the shipping tests: the compiled `kitten-mq` binary (`KITTEN_BIN`, or compiled once
 * per test process into a temp folder), copies of it in folders with no node_modules, brokers
 * started from it the way systemd does, and a client round trip against one.
 *
 * Everything started or created here is tracked: `cleanupAll()` (each file's afterAll) kills the
 * processes and removes the folders, the compiled binary included (bun test runs no exit hook, so
 * nothing may be left for one: the next file compiles again, about 3 s).
 */
import { chmodSync, copyFileSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import type { Subprocess } from "bun";
import { client } from "../../mod.ts";
import { TempDirs } from "../helpers/temp_dir.ts";

export const ROOT = resolve(import.meta.dir, "../..");

const processes = new Set<Subprocess>();
const folders = new TempDirs("kitten-ship-");

/** A temp folder removed by `cleanupAll()`: `tempDir(prefix = "kitten-ship-")`. */
export const tempDir = folders.make;

export async function cleanupAll(): Promise<void> {
  for (const child of processes) {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await child.exited;
  }
  processes.clear();
  folders.removeAll();
  if (compiled) await compiled.catch(() => {});
  if (compiledDir) rmSync(compiledDir, { recursive: true, force: true });
  compiledDir = null;
  compiled = null;
}

let compiled: Promise<string> | null = null;
let compiledDir: string | null = null;

/**
 * The binary under test: `$KITTEN_BIN` (as `.ci/run` sets after `bun scripts/compile.ts`), or
 * `scripts/compile.ts --outdir <temp>` run once per test process (about 3 s).
 */
export function shipBinary(): Promise<string> {
  compiled ??= (async () => {
    const fromEnv = process.env.KITTEN_BIN;
    if (fromEnv) {
      const path = resolve(fromEnv);
      if (!existsSync(path)) throw new Error(`KITTEN_BIN=${fromEnv}: no such file (run bun scripts/compile.ts first)`);
      return path;
    }
    compiledDir = mkdtempSync(join(tmpdir(), "kitten-compile-"));
    const result = await run([process.execPath, join(ROOT, "scripts/compile.ts"), "--outdir", compiledDir], { cwd: ROOT });
    if (result.code !== 0) throw new Error(`scripts/compile.ts failed (exit ${result.code}):\n${result.stdout}${result.stderr}`);
    return join(compiledDir, "kitten-mq");
  })();
  return compiled;
}

/** No node_modules in `dir` or any folder above it: a binary there cannot lean on one. */
export function assertNoNodeModules(dir: string): void {
  for (let current = resolve(dir); ; current = dirname(current)) {
    if (existsSync(join(current, "node_modules"))) throw new Error(`${current}/node_modules exists: not an isolated folder`);
    if (dirname(current) === current) return;
  }
}

/** A copy of the binary alone in a fresh temp folder. */
export function isolatedCopy(binary: string): { dir: string; bin: string } {
  const dir = tempDir("kitten-bin-");
  assertNoNodeModules(dir);
  const bin = join(dir, "kitten-mq");
  copyFileSync(binary, bin);
  chmodSync(bin, 0o755);
  return { dir, bin };
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end (asynchronously: a Bun.serve in this process keeps answering). */
export async function run(cmd: string[], options: { cwd?: string; env?: Record<string, string | undefined> } = {}): Promise<RunResult> {
  const child = Bun.spawn(cmd, {
    cwd: options.cwd,
    env: { ...process.env, NO_COLOR: "1", ...options.env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  processes.add(child);
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  processes.delete(child);
  return { code, stdout, stderr };
}

export interface BinaryBroker {
  port: number;
  adminUrl: string;
  /** The client host string `127.0.0.1:<port>@<serviceId>`. */
  host: string;
  process: Subprocess;
  output(): string;
  /** Resolves once `text` appears in the output. */
  waitForOutput(text: string | RegExp, timeoutMs?: number): Promise<void>;
  /** SIGTERM (what systemd sends), then the exit code; SIGKILL after `timeoutMs`. */
  stop(timeoutMs?: number): Promise<number>;
}

/**
 * Starts `bin start --config configPath` in `cwd` and waits for its `listening` and `admin on`
 * lines. `env` replaces this process's environment when given (a PATH without Bun, say).
 */
export async function startBinaryBroker(
  bin: string,
  configPath: string,
  cwd: string,
  serviceId = "broker-1",
  env: Record<string, string | undefined> = process.env,
): Promise<BinaryBroker> {
  const child = Bun.spawn([bin, "start", "--config", configPath], {
    cwd,
    env: { ...env, NO_COLOR: "1", MIMALLOC_PURGE_DELAY: "-1" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  processes.add(child);
  let output = "";
  const drain = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) output += decoder.decode(chunk, { stream: true });
  };
  void drain(child.stdout);
  void drain(child.stderr);

  const waitForOutput = async (text: string | RegExp, timeoutMs = 10_000) => {
    const deadline = Date.now() + timeoutMs;
    const found = () => (typeof text === "string" ? output.includes(text) : text.test(output));
    while (!found()) {
      if (child.exitCode !== null) throw new Error(`the broker exited (${child.exitCode}) before printing ${text}:\n${output}`);
      if (Date.now() > deadline) throw new Error(`no ${text} from the broker within ${timeoutMs} ms:\n${output}`);
      await Bun.sleep(10);
    }
  };
  try {
    await waitForOutput(/kitten-mq admin on \S+/);
  } catch (error) {
    child.kill("SIGKILL");
    throw error;
  }
  const port = Number(/kitten-mq listening on \S+:(\d+)/.exec(output)?.[1]);
  const adminUrl = /kitten-mq admin on (\S+)/.exec(output)![1]!;
  return {
    port,
    adminUrl,
    host: `127.0.0.1:${port}@${serviceId}`,
    process: child,
    output: () => output,
    waitForOutput,
    async stop(timeoutMs = 10_000) {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
      const code = await child.exited;
      clearTimeout(timer);
      processes.delete(child);
      return code;
    },
  };
}

/**
 * The real client against `broker`: connect, consume `ship/v1/*`, send `count` messages, receive
 * each once and ack it; resolves when the admin API shows them all acked and none left.
 */
export async function clientRoundTrip(broker: BinaryBroker, keysDirectory: string, count = 5): Promise<unknown[]> {
  const mq = client();
  try {
    await mq.connect({
      hosts: [broker.host],
      clientId: `ship-test-${process.pid}`,
      keysDirectory,
      reconnectDelayMs: 20,
      maxReconnectDelayMs: 100,
    });
    const received: unknown[] = [];
    await mq.consume("ship/v1/*", (error, message, done) => {
      if (error) throw error;
      received.push(message);
      done();
    }).ready;
    for (let i = 0; i < count; i++) await mq.send(`ship/v1/${i}`, { n: i, text: "from the binary test" });
    const deadline = Date.now() + 10_000;
    for (;;) {
      const response = await fetch(`${broker.adminUrl}/queues/ship/v1`);
      const queue = (await response.json()) as { live?: number; counters?: { acked?: number } };
      if (received.length === count && queue.counters?.acked === count && queue.live === 0) break;
      if (Date.now() > deadline) {
        throw new Error(`round trip incomplete: received ${received.length}/${count}, queue ${JSON.stringify(queue)}`);
      }
      await Bun.sleep(20);
    }
    return received;
  } finally {
    await mq.disconnect().catch(() => {});
  }
}
