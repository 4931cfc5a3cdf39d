/**
 * The receiving workers: `consumer` (consume(channel, …, { prefetch }) and done() per message)
 * and `listener` (listen(channel, …) with its own clientId), on each of its channels. Each counts
 * unique messages by `seq` until it has `count`, and takes every one's publish → deliver latency
 * on the shared clock.
 */
import {
  type BenchSubscription,
  channelsOf,
  connect,
  type Connector,
  type WorkerIo,
  type WorkerOptions,
} from "./connect.ts";
import type { Payload } from "./payload.ts";
import { cpu, now, percentiles } from "./stats.ts";

export async function receive(kind: "consume" | "listen", options: WorkerOptions, io: WorkerIo, open: Connector = connect): Promise<void> {
  const count = options.count;
  const skip = options.skip ?? 0;
  const seen = new Uint8Array(count);
  const latency = new Float64Array(count);
  let unique = 0;
  let duplicates = 0;
  let outOfRange = 0;
  let errors = 0;
  let firstAt = 0;
  let lastAt = 0;
  let finished = false;
  let done!: () => void;
  const all = new Promise<void>((resolve) => (done = resolve));

  const channels = channelsOf(options);
  const asked = kind === "consume" ? options.prefetch ?? 1000 : null;
  let subscriptions: BenchSubscription[] = [];
  const summary = () => ({
    role: kind === "consume" ? "consumer" : "listener",
    clientId: options.clientId,
    expected: count,
    received: unique,
    measured: countFrom(seen, skip),
    duplicates,
    outOfRange,
    errors,
    firstAt,
    lastAt,
    latency: percentiles(latency, seen, skip, count),
    latencyWholeRun: skip > 0 ? percentiles(latency, seen, 0, count) : null,
    cpu: cpu(),
    prefetch: { asked, granted: granted(subscriptions) },
  });
  io.partial = summary;

  const onMessage = (message: unknown): void => {
    const at = now();
    const seq = (message as Payload).seq;
    if (!(seq >= 0 && seq < count)) {
      outOfRange++;
      return;
    }
    if (seen[seq]) {
      duplicates++;
      return;
    }
    seen[seq] = 1;
    latency[seq] = at - (message as Payload).t;
    if (unique === 0) firstAt = at;
    unique++;
    lastAt = at;
    if (unique === count && !finished) {
      finished = true;
      // Let the last acks leave before reporting and closing.
      setTimeout(async () => {
        io.emit("result", summary());
        await mq.disconnect();
        done();
      }, 20);
    }
  };
  const onError = (error: { code: string; message: string }) => {
    errors++;
    io.warn(`${error.code}: ${error.message}`);
  };

  const mq = await open(options, io);
  subscriptions = channels.map((channel) =>
    kind === "consume"
      ? mq.consume(channel, (error, message, ack) => {
        if (error) return onError(error);
        ack();
        onMessage(message);
      }, { prefetch: asked! })
      : mq.listen(channel, (error, message) => {
        if (error) return onError(error);
        onMessage(message);
      })
  );
  await Promise.all(subscriptions.map((subscription) => subscription.ready));
  // The CPU used so far (start-up, connect) is left out of the run's: the parent subtracts it.
  io.emit("ready", { cpu: cpu() });
  await all;
}

/** The smallest prefetch the broker granted the subscriptions (null: none said). */
function granted(subscriptions: readonly BenchSubscription[]): number | null {
  const known = subscriptions.map((subscription) => subscription.prefetch ?? null).filter((value) => value !== null);
  return known.length === 0 ? null : Math.min(...known);
}

/** Messages received with `seq >= skip` (those after the warm-up). */
function countFrom(seen: Uint8Array, skip: number): number {
  let count = 0;
  for (let seq = skip; seq < seen.length; seq++) count += seen[seq]!;
  return count;
}
