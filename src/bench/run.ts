/**
 * One measured run on brokers that are up: the receivers, then the publisher, each its own
 * process; CPU counters before and after; the workers stopped at the end, also when the run
 * fails or times out. `kitten-mq bench` and `npm run bench` both run their scenarios through it.
 */
import { isErrorCode, KittenError } from "../protocol/errors.ts";
import type { BenchBroker } from "./broker.ts";
import { type Child, type Cpu, cpuSeconds, cpuTimes, machineBusySeconds, withTimeout } from "./processes.ts";
import { mergePublished, type PublisherResult, type ReceiverResult, type RunResult, type Snapshot, summarize } from "./results.ts";

export interface Plan {
  receivers: { role: "consumer" | "listener"; options: Record<string, unknown> }[];
  publisher: { role: "publisher" | "rate"; options: Record<string, unknown> };
  /**
   * More senders, started with `publisher` (the scale-out scenario): their reports are merged into
   * one (mergePublished), so a run's figures count every publisher's messages and CPU.
   */
  morePublishers?: { role: "publisher" | "rate"; options: Record<string, unknown> }[];
}

export interface RunContext {
  /** Every worker is given every host (a master and its slaves: sends go to all). */
  hosts: string[];
  keysDirectory: string;
  /** Starts one worker: `role` with its JSON options. */
  spawn(role: string, options: Record<string, unknown>): Child;
  /**
   * The brokers this machine runs for the run, master first: their CPU is counted and an exit
   * fails the run. Empty for a broker elsewhere.
   */
  brokers: readonly BenchBroker[];
  timeoutMs: number;
}

export interface RunOutcome {
  summary: RunResult;
  published: PublisherResult;
  received: ReceiverResult[];
  /** CPU counters as the publisher started and once every receiver was done. */
  before: Snapshot;
  after: Snapshot;
}

/**
 * Runs `plan`; rejects with a KittenError: the worker's own code when it failed (the broker
 * refused it), the first failed send's code, TIMEOUT past `timeoutMs`, INTERNAL when a process
 * died (with what each worker had done by then).
 */
export async function runPlan(plan: Plan, context: RunContext): Promise<RunOutcome> {
  const { hosts, keysDirectory, brokers } = context;
  const children: Child[] = [];
  try {
    const work = (async () => {
      const receivers = plan.receivers.map((r) => context.spawn(r.role, { hosts, keysDirectory, ...r.options }));
      children.push(...receivers);
      const ready = await Promise.all(receivers.map((child) => child.waitJson<{ cpu: { userMs: number; systemMs: number } }>("ready")));
      // A receiver's CPU up to its ready line (start-up, connect) is not the run's.
      const before = await snapshot(brokers, ready.map((line) => cpuSeconds(line.cpu)));
      const publishers = [plan.publisher, ...(plan.morePublishers ?? [])].map((p) => context.spawn(p.role, { hosts, keysDirectory, ...p.options }));
      children.push(...publishers);
      const [published, ...received] = await Promise.all([
        Promise.all(publishers.map((child) => child.waitJson<PublisherResult>("result"))).then(mergePublished).then(refuseFailedSends),
        ...receivers.map((child) => child.waitJson<ReceiverResult>("result")),
      ]);
      const after = await snapshot(brokers, []);
      const receiverResults = received as ReceiverResult[];
      return { summary: summarize(published!, receiverResults, before, after), published: published!, received: receiverResults, before, after };
    })();
    const crashed = new Promise<never>((_, reject) => {
      for (const b of brokers) {
        b.child.exited.then((code) => {
          if (b.stopping) return;
          const which = b === brokers[0] ? "the broker" : "a slave broker";
          reject(new Error(`${which} exited with code ${code}: ${b.child.stderr.trim().slice(-300)}`));
        });
      }
    });
    const timeout = `timed out after ${context.timeoutMs / 1000} s`;
    return await withTimeout(Promise.race([work, crashed]), context.timeoutMs, timeout).catch(async (error: Error) => {
      // A worker's or a send's refusal names the cause; anything else gets what each worker did.
      if (error instanceof KittenError && error.code !== "TIMEOUT" && error.code !== "INTERNAL") throw error;
      const code = error instanceof KittenError ? error.code : "INTERNAL";
      throw new KittenError(code, `${error.message}${await progress(children)}`);
    });
  } finally {
    await Promise.all(children.map((child) => child.stop()));
  }
}

/** A publisher whose sends failed: the receivers would wait for them until the timeout. */
function refuseFailedSends(published: PublisherResult): PublisherResult {
  if (published.failed === 0) return published;
  const code = isErrorCode(published.firstErrorCode) ? published.firstErrorCode : "INTERNAL";
  throw new KittenError(code, `${published.failed} of ${published.sent} sends failed, the first with ${published.firstError}`);
}

/** CPU counters at one moment: the machine, this process, the brokers; the receivers' are given. */
async function snapshot(brokers: readonly BenchBroker[], receivers: Cpu[]): Promise<Snapshot> {
  const self = process.cpuUsage();
  const each = await Promise.all(brokers.map((broker) => cpuTimes(broker.child.pid)));
  return {
    at: performance.now(),
    machine: await machineBusySeconds(),
    self: { user: self.user / 1e6, system: self.system / 1e6 },
    broker: each.reduce((sum, cpu) => ({ user: sum.user + cpu.user, system: sum.system + cpu.system }), { user: 0, system: 0 }),
    brokers: each,
    receivers,
  };
}

/** What each worker had done when a run failed: receivers print `partial` on SIGTERM. */
async function progress(children: Child[]): Promise<string> {
  const notes: string[] = [];
  for (const child of children) {
    if (child.proc.exitCode === null && child.proc.signalCode === null) {
      child.proc.kill("SIGTERM");
      type Report = Partial<ReceiverResult & PublisherResult>;
      const partial = await withTimeout(child.waitJson<Report>("partial"), 1000, "").catch(() => null);
      if (partial?.expected !== undefined) {
        notes.push(`${child.name}: ${partial.received}/${partial.expected} received, ${partial.duplicates} duplicates`);
      } else if (partial?.sent !== undefined) notes.push(`${child.name}: ${partial.sent} sent, ${partial.confirmed} confirmed`);
      else notes.push(`${child.name}: no report`);
    } else {
      notes.push(`${child.name}: exited ${child.proc.exitCode ?? child.proc.signalCode}`);
    }
    const stderr = child.stderr.trim();
    if (stderr) notes.push(`  ${child.name} stderr: ${stderr.split("\n").slice(-3).join(" | ")}`);
  }
  return notes.length > 0 ? `\n      ${notes.join("\n      ")}` : "";
}
