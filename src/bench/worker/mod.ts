/**
 * @module
 * One client process of a benchmark: `kitten-mq bench` starts it as the hidden command
 * `kitten-mq bench-worker <role> '<json options>'`, `npm run bench` as
 * `bun scripts/bench_client.ts <role> '<json options>'`; neither is meant to be run by hand.
 * Runs on Bun and Node: it imports the client (through its mod.ts) and nothing of the broker.
 *
 * Roles: `publisher` and `rate` (./publisher.ts), `consumer` and `listener` (./receiver.ts).
 *
 * Protocol with the parent, one line each on stdout: `ready {"cpu"}` once the subscription is
 * accepted (receivers) or the connection is up (senders), then `result <json>` at the end. On
 * SIGTERM (the parent's timeout) a receiver, or the rate publisher, prints `partial <json>` with
 * what it did so far; a worker that fails prints `error {"code", "message"}` and exits 1.
 *
 * Clock: publisher and receivers are different processes, so a send timestamp is
 * `performance.timeOrigin + performance.now()`: wall-clock based (shared by every process on the
 * machine) with sub-millisecond precision. `process.hrtime()` is per-process in Bun.
 */
import { type Connector, connect, type LineKind, type WorkerIo, type WorkerOptions } from "./connect.ts";
import { publish, publishAtRate } from "./publisher.ts";
import { receive } from "./receiver.ts";

export type { BenchClient, Connector, WorkerIo, WorkerOptions } from "./connect.ts";
export { codedError } from "./connect.ts";
export { type Latency, now, percentiles, round } from "./stats.ts";
export { type Payload, payload } from "./payload.ts";

export const ROLES = ["publisher", "rate", "consumer", "listener"] as const;
export type Role = (typeof ROLES)[number];

/** A worker process's streams, and a promise that resolves when the parent stops it (SIGTERM). */
export interface WorkerProcess {
  stdout(text: string): void;
  stderr(text: string): void;
  terminated: Promise<void>;
}

/** This process's stdout and stderr, and its SIGTERM. */
export function processIo(): WorkerProcess {
  return {
    stdout: (text) => void process.stdout.write(text),
    stderr: (text) => void process.stderr.write(text),
    terminated: new Promise<void>((resolve) => process.once("SIGTERM", () => resolve())),
  };
}

function runRole(role: Role, options: WorkerOptions, io: WorkerIo, open: Connector): Promise<void> {
  switch (role) {
    case "publisher":
      return publish(options, io, open);
    case "rate":
      return publishAtRate(options, io, open);
    case "consumer":
      return receive("consume", options, io, open);
    case "listener":
      return receive("listen", options, io, open);
  }
}

/**
 * A worker's whole life, from its arguments (`<role> '<json options>'`) to its exit code: 0 done,
 * 1 failed (after an `error` line), 2 stopped by the parent (after a `partial` line, if any).
 * `open`: the client it measures (Kitten-MQ's; the peer comparison passes another).
 */
export async function workerMain(args: string[], io: WorkerProcess, open: Connector = connect): Promise<number> {
  const [role, json] = args;
  let options: WorkerOptions;
  try {
    if (!(ROLES as readonly string[]).includes(role ?? "")) throw new Error(`unknown role "${role}"`);
    options = JSON.parse(json ?? "");
  } catch (error) {
    io.stderr(`bench worker: ${(error as Error).message}; usage: <${ROLES.join("|")}> '<json options>'\n`);
    return 1;
  }
  const lines: WorkerIo = {
    emit: (kind: LineKind, data?: unknown) => io.stdout(data === undefined ? `${kind}\n` : `${kind} ${JSON.stringify(data)}\n`),
    warn: (line) => io.stderr(`bench worker ${options.clientId}: ${line}\n`),
    partial: null,
  };
  const ran = runRole(role as Role, options, lines, open).then(
    () => 0,
    (error: Error & { code?: unknown }) => {
      const code = typeof error?.code === "string" ? error.code : "INTERNAL";
      lines.emit("error", { code, message: String(error?.message ?? error) });
      if (code === "INTERNAL") io.stderr(`bench worker ${options.clientId}: ${error?.stack ?? error}\n`);
      return 1;
    },
  );
  const stopped = io.terminated.then(() => {
    if (lines.partial) lines.emit("partial", lines.partial());
    return 2;
  });
  return await Promise.race([ran, stopped]);
}
