/**
 * A benchmark's subprocesses: spawning them (brokers and workers, from the sources or from the
 * compiled binary), reading their line protocol, stopping them, and reading CPU counters from
 * /proc. Only processes started here are ever signalled, by their handle.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { isErrorCode, KittenError } from "../protocol/errors.ts";

const CLK_TCK = 100; // Linux USER_HZ: /proc/<pid>/stat counts CPU time in 1/100 s

/** CPU seconds. */
export interface Cpu {
  user: number;
  system: number;
}

export const cpuTotal = (cpu: Cpu) => cpu.user + cpu.system;

/** A worker's own count (`process.cpuUsage()` in ms) as CPU seconds. */
export const cpuSeconds = (cpu: { userMs: number; systemMs: number }): Cpu => ({ user: cpu.userMs / 1000, system: cpu.systemMs / 1000 });

/** The hidden CLI command that runs one bench worker (src/bench/worker/mod.ts). */
export const WORKER_COMMAND = "bench-worker";

/** The CLI's entry, for running it again from the sources. */
const MAIN = join(import.meta.dir, "..", "cli", "main.ts");

/**
 * True inside a `bun build --compile` executable: every module of it lives in Bun's embedded
 * file system (`/$bunfs/root/…`; `B:\~BUN\root\…` on Windows), and the executable is Bun and the
 * program at once.
 */
export function isCompiled(path: string = import.meta.path): boolean {
  return path.startsWith("/$bunfs/") || /^[A-Za-z]:[\\/]~BUN[\\/]/.test(path);
}

/**
 * The command that runs this same `kitten-mq` again: the compiled executable alone, or Bun with
 * its flags (a `--cpu-prof-md` reaches every process) and src/cli/main.ts.
 */
export function selfCommand(): string[] {
  return isCompiled() ? [process.execPath] : [process.execPath, ...process.execArgv, MAIN];
}

/**
 * Clients run with `MIMALLOC_PURGE_DELAY=-1` (mimalloc keeps freed pages: without it about a third
 * of a busy process's CPU goes to madvise and page faults), brokers with the setting `npm start`
 * and the systemd unit use (docs/durability.md, *Memory coming back*), including the garbage
 * collector sized for 1 GiB of RAM rather than the machine's. Set MIMALLOC_PURGE_DELAY,
 * BROKER_PURGE_DELAY or BUN_JSC_forceRAMSize yourself to compare.
 */
const BROKER_RAM_SIZE = 1024 * 1024 * 1024;
type Env = Record<string, string | undefined>;

export function childEnv(env: Env): Env {
  return { ...env, MIMALLOC_PURGE_DELAY: env.MIMALLOC_PURGE_DELAY ?? "-1" };
}

export function brokerEnv(env: Env): Env {
  return {
    ...env,
    MIMALLOC_PURGE_DELAY: env.BROKER_PURGE_DELAY ?? "3600000",
    BUN_JSC_forceRAMSize: env.BUN_JSC_forceRAMSize ?? String(BROKER_RAM_SIZE),
  };
}

export interface ChildOptions {
  cwd?: string;
  env: Env;
  /** Holds the process while it runs, so that an interruption can end it (by its handle). */
  live?: Set<Subprocess>;
}

/** A subprocess whose stdout speaks line by line: `ready`, `result <json>`, `partial <json>`, `error <json>`. */
export class Child {
  readonly proc: Subprocess<"ignore", "pipe", "pipe">;
  readonly lines: string[] = [];
  stderr = "";
  readonly exited: Promise<number>;
  #waiters: { prefix: string; resolve(line: string): void; reject(error: Error): void }[] = [];

  constructor(readonly name: string, cmd: string[], options: ChildOptions) {
    this.proc = Bun.spawn(cmd, { cwd: options.cwd, env: options.env, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
    const live = options.live;
    live?.add(this.proc);
    void this.#read(this.proc.stdout, (line) => this.#line(line));
    void this.#read(this.proc.stderr, (line) => {
      this.stderr = (this.stderr + line + "\n").slice(-4000);
    });
    this.exited = this.proc.exited.then((code) => {
      live?.delete(this.proc);
      // Let the last stdout lines arrive before failing those still waiting.
      setTimeout(() => {
        for (const waiter of this.#waiters) waiter.reject(this.#failure(code, waiter.prefix));
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

  /** Why a waiter is failed: the worker's own `error` line (a KittenError with its code), or the exit. */
  #failure(code: number, prefix: string): Error {
    const reported = this.lines.find((line) => line.startsWith("error "));
    if (reported !== undefined) {
      try {
        const error = JSON.parse(reported.slice("error ".length)) as { code?: unknown; message?: unknown };
        return new KittenError(isErrorCode(error.code) ? error.code : "INTERNAL", String(error.message));
      } catch {
        // Not JSON: the exit below says what there is.
      }
    }
    return new Error(`${this.name} exited with code ${code} before "${prefix}"${this.#tail()}`);
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

/** CPU seconds (user, system) a live process has used so far, from /proc/<pid>/stat (10 ms steps). */
export async function cpuTimes(pid: number): Promise<Cpu> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { user: Number(fields[11]) / CLK_TCK, system: Number(fields[12]) / CLK_TCK }; // utime, stime
  } catch {
    return { user: NaN, system: NaN };
  }
}

/** `promise`, or a KittenError TIMEOUT with `message` once `ms` have passed. */
export function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout>;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new KittenError("TIMEOUT", message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
