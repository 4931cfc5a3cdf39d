/**
 * The state file: where a running broker's admin API answers, so the other commands find it
 * even when `httpServerPort` is 0 (a free port chosen at start).
 *
 * `kitten-mq start` writes `<dataDirectory>/admin.json` once both listeners are up and removes
 * it when it stops. dataDirectory is the broker's own writable folder (relative to the config
 * file, like every path in it), so the CLI finds the file from the same `--config FILE`. A file
 * left by a killed broker is ignored: its pid no longer runs.
 */
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Config } from "../server/mod.ts";

export interface BrokerState {
  pid: number;
  /** The admin API, with a host the CLI can connect to (0.0.0.0 → 127.0.0.1). */
  adminUrl: string;
  /** The client port, `host:port`. */
  broker: string;
  configPath: string | null;
  startedAt: string;
}

export function statePath(config: Config): string {
  return join(resolve(config.dataDirectory), "admin.json");
}

export async function writeState(config: Config, state: BrokerState): Promise<void> {
  const path = statePath(config);
  await mkdir(resolve(config.dataDirectory), { recursive: true, mode: 0o700 });
  // Written whole, then renamed: a CLI reading at the same moment never sees half a file.
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, JSON.stringify(state, null, 2) + "\n", { mode: 0o644 });
  await rename(temp, path);
}

/** The state of a broker that is still running, or null. */
export async function readState(config: Config): Promise<BrokerState | null> {
  let state: BrokerState;
  try {
    state = JSON.parse(await readFile(statePath(config), "utf8"));
  } catch {
    return null;
  }
  if (typeof state?.adminUrl !== "string" || !Number.isInteger(state.pid)) return null;
  return isRunning(state.pid) ? state : null;
}

/** Removes the file if it is still this process's (another broker may have replaced it). */
export async function removeState(config: Config, pid = process.pid): Promise<void> {
  const path = statePath(config);
  try {
    const state = JSON.parse(await readFile(path, "utf8")) as BrokerState;
    if (state.pid !== pid) return;
  } catch {
    return;
  }
  await rm(path, { force: true });
}

/** Signal 0 tests that a process exists; EPERM means it exists but belongs to another user. */
function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** A host to connect to for a host that was bound: the wildcard addresses mean "this machine". */
export function connectHost(host: string): string {
  if (host === "0.0.0.0") return "127.0.0.1";
  if (host === "::" || host === "[::]") return "[::1]";
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}
