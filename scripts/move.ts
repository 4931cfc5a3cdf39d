/**
 * The queue-move run: `bun scripts/move.ts --messages 1000000`.
 *
 * Real etcd on loopback and two groups of broker processes (fsync; `--replicas 2`: a master and a
 * slave per group, `minInSyncReplicas` 2). The queue `moved/v1` (on g1) is filled with
 * `--messages` messages of 100 bytes nobody consumes; then, while a probe publisher sends to it at
 * `--rate` msg/s and another publisher sends to `other/v1` (on g2: as fast as it can, or at
 * `--other-rate` msg/s), the queue is
 * moved to g2. Measured: the move's time and bytes, how long sends to the queue were held at the
 * switch (the probe's send → confirm latency during the move: p50, p99, max), sends rejected, the
 * other queue's throughput (it has a consumer, so its depth stays flat) during the move against
 * the 2.5 s before it (and the 2.5 s after it, as a control), and, consuming the queue from g2 at
 * the end, confirmed messages lost and deliveries duplicated.
 *
 * `--kill source|target` kills that group's master with SIGKILL halfway through the snapshot.
 *
 * The last line is `move: messages N, seconds S, lost N, rejected N, duplicates N`; the exit code
 * is 1 when a message is lost or a send rejected (or when the run cannot finish).
 */
import { parseArgs } from "node:util";
import { Client, type KittenError } from "../mod.ts";
import { waitFor } from "../tests/helpers/broker.ts";
import { countingInto, harnessClientOptions, tally } from "../tests/helpers/crash.ts";
import { startEtcd } from "../tests/helpers/etcd.ts";
import { MoveDeployment } from "../tests/helpers/move_cluster.ts";

const { values } = parseArgs({
  options: {
    messages: { type: "string", default: "100000" },
    replicas: { type: "string", default: "1" },
    rate: { type: "string", default: "1000" },
    "other-rate": { type: "string", default: "0" },
    kill: { type: "string", default: "" },
    "move-rate": { type: "string", default: "" },
  },
});
const MESSAGES = Number(values.messages);
const REPLICAS = Number(values.replicas);
const RATE = Number(values.rate);
/**
 * `--kill source|target`: kill -9 that group's master once half the snapshot is streamed, and start
 * it again once the move ended (with `--replicas 2`, its slave takes over meanwhile); the move
 * must then end on its own, rolled back or done, and nothing confirmed be lost.
 */
const KILL = values.kill;
/** The other queue's offered load in msg/s; 0: as fast as it goes (200 sends in flight). */
const OTHER_RATE = Number(values["other-rate"]);
/** `--move-rate BYTES`: the brokers' `cluster.moveBytesPerSecond` (default: the config's default). */
const MOVE_RATE = Number(values["move-rate"] || 0);
const PAD = "x".repeat(100 - JSON.stringify({ n: 0, pad: "" }).length - 6);
const BUCKET_MS = 250;
/** How often the run reads the move's record from etcd: often enough for the time it reports, rarely enough to cost nothing. */
const RECORD_POLL_MS = 100;

const percentile = (sorted: number[], p: number) => sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;

const etcd = await startEtcd();
const deployment = new MoveDeployment(etcd);
const clients: Client[] = [];
async function client(name: string, window: number): Promise<Client> {
  const mq = new Client();
  mq.on("error", (_error: KittenError) => {});
  clients.push(mq);
  await mq.connect({ ...harnessClientOptions(deployment.hosts(), `${name}-${process.pid}`, window), sendTimeoutMs: 120_000 });
  return mq;
}

let exitCode = 1;
try {
  await deployment.start(["g1", "g2"], REPLICAS, {
    channels: { "moved/v1": { group: "g1" }, "other/v1": { group: "g2" } },
    ...(MOVE_RATE > 0 ? { cluster: { moveBytesPerSecond: MOVE_RATE } } : {}),
  });
  const confirmed = new Set<number>();
  const rejected: KittenError[] = [];

  // The backlog, with a window of sends in flight.
  const filler = await client("filler", 20_000);
  const fillStart = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: 5000 }, async () => {
    while (next < MESSAGES) {
      const n = next++;
      await filler.send("moved/v1/x", { n, pad: PAD });
      confirmed.add(n);
    }
  }));
  console.log(`filled ${MESSAGES} messages in ${((performance.now() - fillStart) / 1000).toFixed(1)} s`);

  // The probe: sends to the moving queue at RATE, each timed from the call to its confirmation.
  const probe = await client("probe", 20_000);
  const probes: { at: number; ms: number }[] = [];
  let probing = true;
  let probeN = 10_000_000;
  const probeLoop = (async () => {
    const pending: Promise<void>[] = [];
    const started = performance.now();
    let sent = 0;
    while (probing) {
      const due = Math.floor(((performance.now() - started) / 1000) * RATE);
      for (; sent < due; sent++) {
        const n = probeN++;
        const at = performance.now();
        pending.push(probe.send("moved/v1/x", { n, pad: PAD }).then(
          () => {
            confirmed.add(n);
            probes.push({ at, ms: performance.now() - at });
          },
          (error) => void rejected.push(error),
        ));
      }
      await Bun.sleep(2);
    }
    await Promise.all(pending);
  })();

  // Another queue, on the target group, consumed as it fills (its depth stays flat, so its rate
  // does not drift with a growing backlog): its confirmations per bucket.
  const other = await client("other", 50_000);
  const otherConsumer = await client("other-consumer", 2000);
  await otherConsumer.consume("other/v1/*", (_error, _message, done) => done(), { prefetch: 2000 }).ready;
  const buckets = new Map<number, number>();
  let otherRunning = true;
  const otherSend = () =>
    other.send("other/v1/y", { pad: PAD }).then(
      () => {
        const bucket = Math.floor(performance.now() / BUCKET_MS);
        buckets.set(bucket, (buckets.get(bucket) ?? 0) + 1);
      },
      (error) => void rejected.push(error),
    );
  const otherLanes = OTHER_RATE > 0
    ? [(async () => {
      const pending: Promise<void>[] = [];
      const started = performance.now();
      let sent = 0;
      while (otherRunning) {
        const due = Math.floor(((performance.now() - started) / 1000) * OTHER_RATE);
        for (; sent < due; sent++) pending.push(otherSend());
        await Bun.sleep(2);
      }
      await Promise.all(pending);
    })()]
    : Array.from({ length: 200 }, async () => {
      while (otherRunning) await otherSend();
    });

  await Bun.sleep(3000); // the baseline of the other queue
  const moveStart = performance.now();
  const killed = KILL === "" ? null : (await deployment.leader(KILL === "source" ? "g1" : "g2"))!.broker;
  const record = await deployment.requestMove("moved/v1", "g2");
  if (killed) {
    await deployment.waitForRecord("moved/v1", (r) => r.id === record.id && (r.copied >= MESSAGES / 2 || r.state !== "copying"), 600_000, "half the snapshot", RECORD_POLL_MS);
    await deployment.kill(killed);
    console.log(`killed ${killed.name} (the ${KILL} group's master) with SIGKILL after half the snapshot`);
  }
  const ended = await deployment.waitForRecord("moved/v1", (r) => r.id === record.id && r.state !== "copying", 600_000, "the move ends", RECORD_POLL_MS);
  const moveEnd = performance.now();
  if (killed) await deployment.restart(killed);
  await Bun.sleep(3000); // the other queue after the move: the control
  probing = false;
  otherRunning = false;
  await probeLoop;
  await Promise.all(otherLanes);
  if (ended.state !== "done" && !killed) throw new Error(`the move was rolled back: ${ended.reason}`);
  if (ended.state !== "done") console.log(`the move was rolled back: ${ended.reason}`);
  const owner = await deployment.owner("moved/v1");

  const rateOf = (from: number, to: number) => {
    const list: number[] = [];
    for (let b = Math.ceil(from / BUCKET_MS); b < Math.floor(to / BUCKET_MS); b++) list.push((buckets.get(b) ?? 0) * (1000 / BUCKET_MS));
    return list;
  };
  // Means over whole buckets: the same statistic before, during and after.
  const mean = (list: number[]) => list.reduce((a, b) => a + b, 0) / Math.max(1, list.length);
  const before = mean(rateOf(moveStart - 2500, moveStart));
  const duringMean = mean(rateOf(moveStart, moveEnd));
  const after = mean(rateOf(moveEnd + 500, moveEnd + 3000));
  const moving = probes.filter((p) => p.at >= moveStart && p.at <= moveEnd + 1000).map((p) => p.ms).sort((a, b) => a - b);

  // Everything confirmed is delivered by the new owner.
  console.log(`the queue is owned by ${owner}`);
  const consumer = await client("consumer", 2000);
  const received = new Map<number, number>();
  consumer.consume("moved/v1/*", countingInto(received, "n"), { prefetch: 2000 });
  await waitFor(() => [...confirmed].every((n) => received.has(n)), 600_000, "every confirmed message delivered").catch(() => {});
  const { lost, duplicates } = await tally(confirmed, received, 1000);

  const seconds = (moveEnd - moveStart) / 1000;
  console.log(`move of ${ended.copied} messages (${ended.snapshot} in its snapshot): ${seconds.toFixed(1)} s, ` +
    `${((ended.bytes ?? 0) / 1048576).toFixed(1)} MiB streamed, fence ${ended.fenceMs ?? "-"} ms, ${ended.redelivered ?? 0} deliveries in flight at the switch`);
  console.log(`sends to the queue during the move (${moving.length}): p50 ${percentile(moving, 0.5).toFixed(1)} ms, ` +
    `p99 ${percentile(moving, 0.99).toFixed(1)} ms, max ${(moving.at(-1) ?? NaN).toFixed(1)} ms`);
  const slowest = probes.filter((p) => p.at >= moveStart).sort((a, b) => b.ms - a.ms).slice(0, 3);
  console.log(`slowest sends: ${slowest.map((p) => `${p.ms.toFixed(0)} ms sent ${((p.at - moveEnd) / 1000).toFixed(2)} s from the switch`).join(", ")}`);
  const dip = (reference: number) => `${(100 * (1 - duringMean / reference)).toFixed(1)}%`;
  console.log(`other queue: ${before.toFixed(0)} msg/s before, ${duringMean.toFixed(0)} msg/s during, ${after.toFixed(0)} msg/s after: a dip of ${dip(before)} from before, ${dip(after)} from after`);
  console.log(`move: messages ${MESSAGES}, seconds ${seconds.toFixed(1)}, lost ${lost.length}, rejected ${rejected.length}, duplicates ${duplicates}`);
  exitCode = lost.length === 0 && rejected.length === 0 ? 0 : 1;
} catch (error) {
  console.error(`move run failed: ${(error as Error).message}`);
} finally {
  for (const mq of clients) await mq.disconnect();
  await deployment.cleanup();
  await etcd.cleanup();
}
process.exit(exitCode);
