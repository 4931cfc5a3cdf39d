/**
 * Elections for tests, in this process (`startElection`) or in a child process that can be killed
 * with SIGKILL (`spawnElection`). Both record every event with the time it was seen
 * (`performance.now()` of this process), so tests can compare orders across candidates.
 */
import { join } from "node:path";
import { Election, type LeaderInfo } from "../../src/server/cluster/election.ts";

export type ElectionRecord =
  | { event: "elected"; epoch: number; at: number }
  | { event: "steppedDown"; reason: string; at: number }
  | { event: "leader"; current: LeaderInfo | null; at: number }
  | { event: "log"; level: string; message: string; at: number };

export interface ElectionSetup {
  endpoints: string[];
  prefix: string;
  leaseTtlSeconds?: number;
  /** The group elected for (default "default"). */
  group?: string;
}

/** A key prefix of its own for each test, so tests sharing one etcd do not see each other. */
export function testPrefix(): string {
  return `kitten-mq/test-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2, 8)}/`;
}

export interface RecordedElection {
  readonly name: string;
  readonly election: Election;
  readonly records: ElectionRecord[];
  elections(): number[];
  stepDowns(): string[];
}

/** An Election in this process, started, recording its events; eligible unless told otherwise. */
export function startElection(name: string, setup: ElectionSetup, eligible = true): RecordedElection {
  const records: ElectionRecord[] = [];
  const election = new Election(
    {
      endpoints: setup.endpoints,
      leaseTtlSeconds: setup.leaseTtlSeconds ?? 2,
      prefix: setup.prefix,
      group: setup.group ?? "default",
      candidate: name,
      log: (level, message) => records.push({ event: "log", level, message, at: performance.now() }),
    },
    {
      elected: (epoch) => records.push({ event: "elected", epoch, at: performance.now() }),
      steppedDown: (reason) => records.push({ event: "steppedDown", reason, at: performance.now() }),
      leader: (current) => records.push({ event: "leader", current, at: performance.now() }),
    },
  );
  election.start();
  election.setEligible(eligible);
  return { name, election, records, elections: () => epochsOf(records), stepDowns: () => reasonsOf(records) };
}

export interface ChildElection {
  readonly name: string;
  readonly pid: number;
  readonly records: ElectionRecord[];
  elections(): number[];
  stepDowns(): string[];
  send(command: "eligible" | "ineligible" | "resign" | "stop"): void;
  /** SIGKILL: the lease is left for etcd to expire. */
  kill(): Promise<void>;
  readonly exited: Promise<number | null>;
}

/** An Election in a child process (eligible), recording what it reports on stdout. */
export function spawnElection(name: string, setup: ElectionSetup): ChildElection {
  const records: ElectionRecord[] = [];
  const options = { endpoints: setup.endpoints, leaseTtlSeconds: setup.leaseTtlSeconds ?? 2, prefix: setup.prefix, group: setup.group ?? "default", candidate: name };
  const proc = Bun.spawn([process.execPath, join(import.meta.dir, "election_child.ts"), JSON.stringify(options)], {
    stdin: "pipe",
    stdout: "pipe",
    stderr: "inherit",
  });
  void (async () => {
    let buffered = "";
    const decoder = new TextDecoder();
    for await (const chunk of proc.stdout) {
      buffered += decoder.decode(chunk, { stream: true });
      let newline: number;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        records.push({ ...JSON.parse(line), at: performance.now() });
      }
    }
  })();
  const child: ChildElection = {
    name,
    pid: proc.pid,
    records,
    elections: () => epochsOf(records),
    stepDowns: () => reasonsOf(records),
    send(command) {
      proc.stdin.write(command + "\n");
      proc.stdin.flush();
    },
    async kill() {
      proc.kill("SIGKILL");
      await proc.exited;
    },
    exited: proc.exited,
  };
  child.send("eligible");
  return child;
}

function epochsOf(records: ElectionRecord[]): number[] {
  return records.flatMap((r) => (r.event === "elected" ? [r.epoch] : []));
}

function reasonsOf(records: ElectionRecord[]): string[] {
  return records.flatMap((r) => (r.event === "steppedDown" ? [r.reason] : []));
}

/** The time of the first record of `event` at or after `since`, or undefined. */
export function firstAt(records: ElectionRecord[], event: ElectionRecord["event"], since = 0): number | undefined {
  return records.find((r) => r.event === event && r.at >= since)?.at;
}
