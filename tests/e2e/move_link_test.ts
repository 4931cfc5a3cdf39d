/**
 * A queue move's link to the target group's master (real etcd, broker processes, one broker per
 * group, g2 behind a relay): until the target took the move, a link that fails is tried again,
 * for up to 10 s, because what fails it at the start of a move often passes within moments (a
 * target whose queue map has not shown it the source yet refuses it as a peer, a group still
 * electing its master). Past that the move is rolled back, naming the last failure. A link that
 * ends while the snapshot streams is made again the same way, and the source writes again what
 * the target had not acknowledged.
 */
import { expect, it } from "bun:test";
import { OP } from "../../src/protocol/mod.ts";
import { waitFor } from "../helpers/broker.ts";
import { countingInto } from "../helpers/crash.ts";
import { type MoveDeployment, moveSuite } from "../helpers/move_cluster.ts";

const QUEUE = "linked/v1";
const BACKLOG = 500;

const suite = moveSuite();

/** g1 and g2 (g2 relayed), the queue on g1 with a confirmed backlog; the target's relay refusing connections. */
async function withTargetDown(): Promise<MoveDeployment> {
  const d = suite.deploy();
  await d.start(["g1", "g2"], 1, { channels: { [QUEUE]: { group: "g1" } } }, ["g2"]);
  const publisher = await suite.client(d.hosts(), "publisher");
  await Promise.all(Array.from({ length: BACKLOG }, (_, n) => publisher.send(`${QUEUE}/x`, { n })));
  d.brokers.find((b) => b.group === "g2")!.relay!.down();
  return d;
}

/** Consumes the queue and checks that messages 0 to `total` - 1 each came, none other; returns how many came. */
async function expectEveryMessage(d: MoveDeployment, total: number, by: string): Promise<Map<number, number>> {
  const received = new Map<number, number>();
  const consumer = await suite.client(d.hosts(), "consumer");
  consumer.consume(`${QUEUE}/*`, countingInto(received, "n"), { prefetch: 1000 });
  await waitFor(() => received.size === total, 30_000, `every message delivered by ${by}`);
  expect([...received.keys()].sort((a, b) => a - b)).toEqual(Array.from({ length: total }, (_, n) => n));
  return received;
}

const source = (d: MoveDeployment) => d.brokers.find((b) => b.group === "g1")!;
const target = (d: MoveDeployment) => d.brokers.find((b) => b.group === "g2")!;

it("a target that cannot be linked to at first: the source links again until it takes the move, which ends done with every message", async () => {
  const d = await withTargetDown();
  const record = await d.requestMove(QUEUE, "g2");
  await waitFor(() => source(d).child!.output().includes("linking again"), 10_000, "the source tries to link again");
  expect((await d.record(QUEUE))!.state).toBe("copying");
  target(d).relay!.open();
  const ended = await d.waitForRecord(QUEUE, (r) => r.id === record.id && r.state !== "copying", 30_000, "the move ends");
  expect({ state: ended.state, reason: ended.reason ?? null }).toEqual({ state: "done", reason: null });
  expect(await d.owner(QUEUE)).toBe("g2");
  await expectEveryMessage(d, BACKLOG, "g2");
}, 60_000);

it("a target that cannot be linked to for 10 s: the move is rolled back, naming the last failure, and the queue stays", async () => {
  const d = await withTargetDown();
  const record = await d.requestMove(QUEUE, "g2");
  const ended = await d.waitForRecord(QUEUE, (r) => r.id === record.id && r.state !== "copying", 30_000, "the move ends", 100);
  expect(ended.state).toBe("rolled-back");
  expect(ended.reason).toContain("the target did not take the move within 10000 ms; the last try: the link to the target ended");
  expect(await d.owner(QUEUE)).toBe("g1");
  await expectEveryMessage(d, BACKLOG, "g1");
}, 60_000);

it("a link cut while the snapshot streams: the source links again, writes what was not acknowledged, and the move ends done with every message", async () => {
  const d = suite.deploy();
  // Paced, so that the snapshot of 20,000 messages streams for a few seconds.
  await d.start(["g1", "g2"], 1, { channels: { [QUEUE]: { group: "g1" } }, cluster: { moveBytesPerSecond: 500_000 } }, ["g2"]);
  const publisher = await suite.client(d.hosts(), "publisher");
  const total = 20_000;
  for (let from = 0; from < total; from += 2000) {
    await Promise.all(Array.from({ length: 2000 }, (_, i) => publisher.send(`${QUEUE}/x`, { n: from + i })));
  }
  let acks = 0;
  target(d).relay!.holdAfterFrame((frame) => {
    if (Array.isArray(frame) && frame[0] === OP.MOVE_ACK) acks++;
    return false; // watched, never held
  });
  const record = await d.requestMove(QUEUE, "g2");
  await waitFor(() => acks >= 2, 20_000, "the target acknowledges part of the snapshot");
  target(d).relay!.cut();
  const ended = await d.waitForRecord(QUEUE, (r) => r.id === record.id && r.state !== "copying", 30_000, "the move ends");
  expect({ state: ended.state, reason: ended.reason ?? null }).toEqual({ state: "done", reason: null });
  const log = source(d).child!.output();
  expect(log).toMatch(/linked to the target again; writing again \d+ bytes it had not acknowledged \(entries after [1-9]\d*\)/);
  expect(target(d).child!.output()).toContain("again (keeping what it took so far)");
  const received = await expectEveryMessage(d, total, "g2");
  // No consumer ran during the move: an entry written again and stored twice would come twice.
  expect([...received.values()].filter((count) => count > 1)).toEqual([]);
}, 90_000);
