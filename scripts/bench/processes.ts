/**
 * The subprocesses of `npm run bench`: src/bench/processes.ts's, run from the repository with the
 * benchmark's environment and tracked here, so SIGINT and timeouts end them (by their handle,
 * never by name) and remove the temp folders.
 */
import { rm } from "node:fs/promises";
import { resolve } from "node:path";
import type { Subprocess } from "bun";
import { brokerEnv, Child as BenchChild, childEnv } from "../../src/bench/processes.ts";

export { type Cpu, cpuTimes, cpuTotal, machineBusySeconds, withTimeout } from "../../src/bench/processes.ts";

export const ROOT = resolve(import.meta.dir, "..", "..");

/** Every live subprocess, so SIGINT and timeouts can end them (by their handle, never by name). */
export const live = new Set<Subprocess>();
export const tempDirs = new Set<string>();

export const CHILD_ENV = childEnv(process.env);
export const BROKER_ENV = brokerEnv(process.env);

/** A subprocess of the benchmark, in the repository, with the environment of its kind (a name starting with "broker" is a broker). */
export class Child extends BenchChild {
  constructor(name: string, cmd: string[]) {
    super(name, cmd, { cwd: ROOT, env: name.startsWith("broker") ? BROKER_ENV : CHILD_ENV, live });
  }
}

/** Kills every live subprocess and removes every temp folder (SIGINT, a failed run). */
export async function cleanup(): Promise<void> {
  for (const proc of live) proc.kill("SIGKILL");
  for (const dir of tempDirs) await rm(dir, { recursive: true, force: true });
}

/**
 * A free port is found by binding port 0 and closing it, so another process may take it before
 * the server binds it: the server then exits with "address already in use", and a start with new
 * ports goes again (nats-server's routes need each port before the servers start).
 */
export async function retryOnPortTaken<T>(start: () => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start();
    } catch (error) {
      if (attempt >= attempts || !/address already in use/i.test((error as Error).message)) throw error;
    }
  }
}
