/**
 * The benchmark's subprocesses: spawning them with the benchmark's environment, reading their
 * line protocol, stopping them, and reading CPU counters from /proc. Only processes started here
 * are ever signalled, by their handle.
 */
import { readFile, rm } from "node:fs/promises";
import { resolve } from "node:path";
import type { Subprocess } from "bun";

export const ROOT = resolve(import.meta.dir, "..", "..");
const CLK_TCK = 100; // Linux USER_HZ: /proc/<pid>/stat counts CPU time in 1/100 s

/** CPU seconds. */
export interface Cpu {
  user: number;
  system: number;
}

export const cpuTotal = (cpu: Cpu) => cpu.user + cpu.system;

/** Every live subprocess, so SIGINT and timeouts can end them (by their handle, never by name). */
export const live = new Set<Subprocess>();
export const tempDirs = new Set<string>();

/**
 * Clients run with `MIMALLOC_PURGE_DELAY=-1` (mimalloc keeps freed pages: without it about a third
 * of a busy process's CPU goes to madvise and page faults), brokers with the setting `npm start`
 * and the systemd unit use (docs/durability.md, *Memory coming back*), including the garbage
 * collector sized for 1 GiB of RAM rather than the machine's. Set MIMALLOC_PURGE_DELAY,
 * BROKER_PURGE_DELAY or BUN_JSC_forceRAMSize yourself to compare.
 */
const BROKER_RAM_SIZE = 1024 * 1024 * 1024;
export const CHILD_ENV = { ...process.env, MIMALLOC_PURGE_DELAY: process.env.MIMALLOC_PURGE_DELAY ?? "-1" };
export const BROKER_ENV = {
  ...process.env,
  MIMALLOC_PURGE_DELAY: process.env.BROKER_PURGE_DELAY ?? "3600000",
  BUN_JSC_forceRAMSize: process.env.BUN_JSC_forceRAMSize ?? String(BROKER_RAM_SIZE),
};

/** A subprocess whose stdout speaks line by line: `ready`, `result <json>`, `partial <json>`. */
export class Child {
  readonly proc: Subprocess<"ignore", "pipe", "pipe">;
  readonly lines: string[] = [];
  stderr = "";
  readonly exited: Promise<number>;
  #waiters: { prefix: string; resolve(line: string): void; reject(error: Error): void }[] = [];

  constructor(readonly name: string, cmd: string[]) {
    this.proc = Bun.spawn(cmd, { cwd: ROOT, env: name.startsWith("broker") ? BROKER_ENV : CHILD_ENV, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
    live.add(this.proc);
    void this.#read(this.proc.stdout, (line) => this.#line(line));
    void this.#read(this.proc.stderr, (line) => {
      this.stderr = (this.stderr + line + "\n").slice(-4000);
    });
    this.exited = this.proc.exited.then((code) => {
      live.delete(this.proc);
      // Let the last stdout lines arrive before failing those still waiting.
      setTimeout(() => {
        for (const waiter of this.#waiters) {
          waiter.reject(new Error(`${this.name} exited with code ${code} before "${waiter.prefix}"${this.#tail()}`));
        }
        this.#waiters = [];
      }, 50);
      return code;
    });
  }

  get pid(): number {
    return this.proc.pid;
  }

  /** Resolves with the rest of the first line (past or future) that starts with `prefix`. */
  waitFor(prefix: string): Promise<string> {
    const found = this.lines.find((line) => line.startsWith(prefix));
    if (found !== undefined) return Promise.resolve(found.slice(prefix.length).trim());
    return new Promise((resolve, reject) => this.#waiters.push({ prefix, resolve, reject }));
  }

  async waitJson<T>(prefix: string): Promise<T> {
    return JSON.parse(await this.waitFor(prefix)) as T;
  }

  /** SIGTERM, then SIGKILL if it is still there after `graceMs`; once it resolves, `live` no longer holds it. */
  async stop(graceMs = 1000): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
      await this.exited; // it may have exited a moment ago, before `exited` took it out of `live`
      return;
    }
    this.proc.kill("SIGTERM");
    const timer = setTimeout(() => this.proc.kill("SIGKILL"), graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  #line(line: string): void {
    this.lines.push(line);
    this.#waiters = this.#waiters.filter((waiter) => {
      if (!line.startsWith(waiter.prefix)) return true;
      waiter.resolve(line.slice(waiter.prefix.length).trim());
      return false;
    });
  }

  #tail(): string {
    const text = this.stderr.trim();
    return text ? `; stderr: ${text.split("\n").slice(-5).join(" | ")}` : "";
  }

  async #read(stream: ReadableStream<Uint8Array>, onLine: (line: string) => void): Promise<void> {
    const decoder = new TextDecoder();
    let buffered = "";
    for await (const chunk of stream) {
      buffered += decoder.decode(chunk, { stream: true });
      let newline: number;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        onLine(buffered.slice(0, newline));
        buffered = buffered.slice(newline + 1);
      }
    }
    if (buffered) onLine(buffered);
  }
}

/** CPU seconds the whole machine spent busy (every core, every process), from /proc/stat. */
export async function machineBusySeconds(): Promise<number> {
  try {
    const [user, nice, system, _idle, _iowait, irq, softirq, steal] = (await readFile("/proc/stat", "utf8"))
      .split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
    return (user! + nice! + system! + irq! + softirq! + steal!) / CLK_TCK;
  } catch {
    return NaN;
  }
}

/** CPU seconds (user, system) a live process has used so far, from /proc/<pid>/stat. */
export async function cpuTimes(pid: number): Promise<Cpu> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { user: Number(fields[11]) / CLK_TCK, system: Number(fields[12]) / CLK_TCK }; // utime, stime
  } catch {
    return { user: NaN, system: NaN };
  }
}

export function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout>;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Kills every live subprocess and removes every temp folder (SIGINT, a failed run). */
export async function cleanup(): Promise<void> {
  for (const proc of live) proc.kill("SIGKILL");
  for (const dir of tempDirs) await rm(dir, { recursive: true, force: true });
}

