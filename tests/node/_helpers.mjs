/**
 * Helpers of the Node suite (`node --test`, run by scripts/test.ts after it has built the npm
 * package's client into tests/node/node_modules/kitten-mq). The client under test is the built
 * package, imported by name through its `exports`; the broker is the real one, a Bun subprocess
 * started from the sources (the broker does not run on Node).
 *
 * Everything started here is tracked and stopped by `cleanup()` (each file's `afterEach`).
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const BUN = join(ROOT, "node_modules/.bin/bun");

const brokers = new Set();
const folders = [];
const clients = new Set();

/** A temp folder removed by `cleanup()`. */
export function tempDir(prefix = "kitten-node-") {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  folders.push(dir);
  return dir;
}

/** Tracks a client so `cleanup()` disconnects it, even when the test failed. */
export function track(mq) {
  clients.add(mq);
  return mq;
}

/** Resolves once `predicate()` is truthy, polling every 5 ms; throws after `timeoutMs`. */
export async function waitFor(predicate, timeoutMs = 5000, what = predicate.toString()) {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`waitFor timed out after ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A port that was free a moment ago. */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

/**
 * Starts `bun src/cli/main.ts start` with a config in a temp folder (memory durability, no admin
 * interface, `overrides` merged over it, `socketServer` deeply) and waits for its `listening` line.
 */
export async function startBroker(overrides = {}) {
  const dir = tempDir("kitten-node-broker-");
  const configPath = join(dir, "kitten-mq.config.json");
  const config = {
    isManagementInterface: false,
    durability: "memory",
    logLevel: 3,
    ...overrides,
    socketServer: { port: 0, host: "127.0.0.1", ...overrides.socketServer },
  };
  writeFileSync(configPath, JSON.stringify(config));
  const child = spawn(BUN, ["src/cli/main.ts", "start", "--config", configPath], {
    cwd: ROOT,
    env: { ...process.env, NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (chunk) => (output += chunk));
  child.stderr.on("data", (chunk) => (output += chunk));
  const exited = new Promise((r) => child.once("exit", (code, signal) => r(code ?? signal)));
  const broker = {
    host: "",
    port: 0,
    output: () => output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
      brokers.delete(broker);
    },
  };
  brokers.add(broker);
  let ended = false;
  void exited.then(() => (ended = true));
  await waitFor(() => ended || /kitten-mq listening on \S+:\d+/.test(output), 15_000, "the broker's listening line");
  if (ended) throw new Error(`the broker exited before listening:\n${output}`);
  broker.port = Number(/kitten-mq listening on \S+:(\d+)/.exec(output)[1]);
  broker.host = `127.0.0.1:${broker.port}@${config.serviceId ?? "broker-1"}`;
  return broker;
}

let seq = 0;

/** Client options for `hosts`: a unique clientId, fast reconnects, keys in `keysDirectory`. */
export function options(hosts, keysDirectory, extra = {}) {
  return {
    hosts,
    clientId: `node-test-${process.pid}-${++seq}`,
    keysDirectory,
    reconnectDelayMs: 20,
    maxReconnectDelayMs: 100,
    ...extra,
  };
}

/** Disconnects every tracked client, stops every broker, removes every temp folder. */
export async function cleanup() {
  for (const mq of clients) await mq.disconnect().catch(() => {});
  clients.clear();
  for (const broker of [...brokers]) await broker.stop();
  for (const dir of folders.splice(0)) rmSync(dir, { recursive: true, force: true });
}
