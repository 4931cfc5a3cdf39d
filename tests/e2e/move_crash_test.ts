/**
 * kill -9 during a queue move (real etcd, broker processes, two groups of two brokers each,
 * `minInSyncReplicas` 2): of the source group's master and of the target group's master, during
 * the snapshot, at the fence and after the switch, and of the broker that asked for the move. Each ends with the
 * queue owned by exactly one group, the move finished or rolled back on its own, and every
 * confirmed message delivered, while a publisher sends throughout.
 */
import { expect, it } from "bun:test";
import type { Client, KittenError } from "../../mod.ts";
import { waitFor } from "../helpers/broker.ts";
import { countingInto, tally } from "../helpers/crash.ts";
import { type MoveBroker, type MoveDeployment, moveSuite } from "../helpers/move_cluster.ts";
import { OP } from "../../src/protocol/mod.ts";

const QUEUE = "mv/v1";
const BACKLOG = 20_000;

const suite = moveSuite();
const client = suite.client;

/** A publisher with `window` sends in flight, recording every confirmed message, until stopped. */
function publish(mq: Client, confirmed: Set<number>, from: number, window = 200) {
  let next = from;
  let running = true;
  const failures: KittenError[] = [];
  const lane = async () => {
    while (running) {
      const n = next++;
      try {
        await mq.send(`${QUEUE}/x`, { n });
        confirmed.add(n);
      } catch (error) {
        failures.push(error as KittenError);
      }
    }
  };
  const lanes = Array.from({ length: window }, lane);
  return {
    stop: async () => {
      running = false;
      await Promise.all(lanes);
      return failures;
    },
  };
}

/**
 * A deployment of g1 and g2 with the queue on g1 and a backlog of `backlog` confirmed messages;
 * g2's brokers behind relays when `relayed`.
 */
async function setUp(
  backlog = BACKLOG,
  relayed = false,
  perGroup = 2,
  cluster: Record<string, unknown> = {},
): Promise<{ d: MoveDeployment; publisher: Client; confirmed: Set<number> }> {
  const d = suite.deploy();
  await d.start(["g1", "g2"], perGroup, { channels: { [QUEUE]: { group: "g1" } }, cluster }, relayed ? ["g2"] : []);
  const publisher = await client(d.hosts(), "publisher");
  const confirmed = new Set<number>();
  const fill = publish(publisher, confirmed, 0, 1000);
  await waitFor(() => confirmed.size >= backlog, 60_000, "the backlog is confirmed");
  expect(await fill.stop()).toEqual([]);
  expect(await d.owner(QUEUE)).toBe("g1");
  return { d, publisher, confirmed };
}

/** Consumes the queue to the end and checks that every confirmed message came. */
async function expectAllDelivered(d: MoveDeployment, confirmed: Set<number>): Promise<number> {
  const consumer = await client(d.brokers.filter((b) => b.child?.proc.exitCode === null).map((b) => b.host), "consumer");
  const received = new Map<number, number>();
  consumer.consume(`${QUEUE}/*`, countingInto(received, "n"), { prefetch: 1000 });
  await waitFor(() => [...confirmed].every((n) => received.has(n)), 60_000, "every confirmed message delivered").catch((error) => {
    const missing = [...confirmed].filter((n) => !received.has(n));
    console.log(`missing ${missing.length} of ${confirmed.size}: ${missing.slice(0, 20).join(",")} … ${missing.slice(-5).join(",")}; received ${received.size}`);
    for (const b of d.brokers) console.log(b.name, b.child?.output().split("\n").filter((l) => /move|dropped|elected|owns/.test(l)).slice(-12).join("\n"));
    throw error;
  });
  const { lost, duplicates } = await tally(confirmed, received, 300);
  expect(lost).toEqual([]);
  return duplicates;
}

const streaming = (output: string) => output.includes(`move of "${QUEUE}" to group "g2": streaming`);

/** The record of move `id` once it ended (done or rolled back), by itself. */
const moveEnd = (d: MoveDeployment, id: string) =>
  d.waitForRecord(QUEUE, (r) => r.id === id && r.state !== "copying", 60_000, "the move ends on its own");

/** Waits for 200 more confirmations than now: sends go on. */
async function confirmedAgain(confirmed: Set<number>, what: string): Promise<void> {
  const before = confirmed.size;
  await waitFor(() => confirmed.size > before + 200, 30_000, what);
}

/** Stops the publisher (none of its sends failed) and checks every confirmed message is delivered. */
async function finish(d: MoveDeployment, sending: { stop(): Promise<KittenError[]> }, confirmed: Set<number>): Promise<void> {
  expect(await sending.stop()).toEqual([]);
  await expectAllDelivered(d, confirmed);
}

it("kill -9 of the source group's master during the snapshot: its next master rolls the move back, the queue stays on g1, nothing confirmed is lost", async () => {
  const { d, publisher, confirmed } = await setUp();
  const source = (await d.leader("g1"))!;
  const sending = publish(publisher, confirmed, 1_000_000, 50);
  const record = await d.requestMove(QUEUE, "g2");
  await waitFor(() => streaming(source.broker.child!.output()), 20_000, "the source streams the snapshot");
  await d.kill(source.broker);
  const ended = await moveEnd(d, record.id);
  expect(ended.state).toBe("rolled-back");
  expect(ended.reason).toContain("master of group \"g1\" changed");
  expect(await d.owner(QUEUE)).toBe("g1");
  // g1 has one broker left, below minInSyncReplicas: it confirms again once the killed one is back.
  await d.restart(source.broker);
  await confirmedAgain(confirmed, "sends are confirmed again");
  await finish(d, sending, confirmed);
}, 120_000);

it("kill -9 of the target group's master during the snapshot, leaving its group one broker (minInSyncReplicas 2): the source rolls the move back, the queue stays on g1, nothing confirmed is lost", async () => {
  const { d, publisher, confirmed } = await setUp();
  const source = (await d.leader("g1"))!;
  const target = (await d.leader("g2"))!;
  const sending = publish(publisher, confirmed, 1_000_000, 50);
  const record = await d.requestMove(QUEUE, "g2");
  await waitFor(() => streaming(source.broker.child!.output()), 20_000, "the source streams the snapshot");
  await d.kill(target.broker);
  const ended = await moveEnd(d, record.id);
  expect(ended.state).toBe("rolled-back");
  // The source linked to the slave elected in its place, which cannot take writes alone.
  expect(ended.reason).toMatch(/^the target acknowledged nothing more within 20000 ms of its link ending; the last: /);
  // It refused the move at MOVE_BEGIN, before the source wrote again what it held unacknowledged,
  // and the source asked again every LINK_RETRY_MS, not in a loop (which said so hundreds of times).
  const elected = d.brokers.find((b) => b.group === "g2" && b !== target.broker)!;
  expect(elected.child!.output().match(/taking it in from group/g) ?? []).toEqual([]);
  const refusals = source.broker.child!.output().match(/the target refused: NOT_ENOUGH_REPLICAS[^\n]*; linking again/g) ?? [];
  expect(refusals.length).toBeGreaterThanOrEqual(1);
  expect(refusals.length).toBeLessThanOrEqual(10);
  expect(await d.owner(QUEUE)).toBe("g1");
  await confirmedAgain(confirmed, "sends go on on g1");
  await finish(d, sending, confirmed);
}, 120_000);

it("kill -9 of the target group's master during the snapshot, with two slaves: the source links to the one elected in its place, which keeps what it held; the move ends done, nothing confirmed is lost", async () => {
  // g2 behind relays, to see its acknowledgements; the snapshot paced, to kill in its middle.
  const { d, publisher, confirmed } = await setUp(BACKLOG, true, 3, { moveBytesPerSecond: 500_000 });
  const source = (await d.leader("g1"))!;
  const target = (await d.leader("g2"))!;
  let acks = 0;
  target.broker.relay!.holdAfterFrame((frame) => {
    if (Array.isArray(frame) && frame[0] === OP.MOVE_ACK) acks++;
    return false; // watched, never held
  });
  const sending = publish(publisher, confirmed, 1_000_000, 50);
  const record = await d.requestMove(QUEUE, "g2");
  // Part of the snapshot is held by the target and its in-sync slaves: the next master keeps it.
  await waitFor(() => acks >= 3, 20_000, "the target acknowledges part of the snapshot");
  await d.kill(target.broker);
  const ended = await moveEnd(d, record.id);
  expect({ state: ended.state, reason: ended.reason ?? null }).toEqual({ state: "done", reason: null });
  expect(source.broker.child!.output()).toMatch(/linked to the target again; writing again \d+ bytes it had not acknowledged \(entries after [1-9]\d*\)/);
  const elected = (await d.leader("g2"))!;
  expect(elected.broker).not.toBe(target.broker);
  expect(elected.broker.child!.output()).toMatch(/taking it in from group "g1" \(move [^)]+\) again \(keeping the messages it held as a slave\)/);
  expect(await d.owner(QUEUE)).toBe("g2");
  await confirmedAgain(confirmed, "sends go on on g2");
  await finish(d, sending, confirmed);
}, 120_000);

it("kill -9 of the source group's master right after the switch: g2 serves the queue, nothing confirmed is lost", async () => {
  const { d, publisher, confirmed } = await setUp();
  const source = (await d.leader("g1"))!;
  const sending = publish(publisher, confirmed, 1_000_000, 50);
  const record = await d.requestMove(QUEUE, "g2");
  const done = await moveEnd(d, record.id);
  expect(done.state).toBe("done");
  await d.kill(source.broker);
  expect(await d.owner(QUEUE)).toBe("g2");
  await confirmedAgain(confirmed, "sends are confirmed by g2");
  await finish(d, sending, confirmed);
}, 120_000);

it("kill -9 of the broker that asked for the move (a slave of g2): the move finishes on its own", async () => {
  const { d, publisher, confirmed } = await setUp();
  const target = (await d.leader("g2"))!;
  const asker = d.brokers.find((b) => b.group === "g2" && b !== target.broker)!;
  const sending = publish(publisher, confirmed, 1_000_000, 50);
  const record = await d.requestMove(QUEUE, "g2", asker.name);
  await d.kill(asker);
  // The target group has one broker left: minInSyncReplicas 2 refuses what it streams in, and
  // the move is rolled back; either way it ends on its own, with the queue owned once.
  const ended = await moveEnd(d, record.id);
  expect(["done", "rolled-back"]).toContain(ended.state);
  expect(await d.owner(QUEUE)).toBe(ended.state === "done" ? "g2" : "g1");
  await finish(d, sending, confirmed);
}, 120_000);

it("kill -9 of the target group's master right after the switch: its slave is elected and serves the queue, nothing confirmed is lost", async () => {
  const { d, publisher, confirmed } = await setUp();
  const target = (await d.leader("g2"))!;
  const sending = publish(publisher, confirmed, 1_000_000, 50);
  const record = await d.requestMove(QUEUE, "g2");
  const done = await moveEnd(d, record.id);
  expect(done.state).toBe("done");
  await d.kill(target.broker);
  await waitFor(async () => (await d.leader("g2"))?.broker !== target.broker && (await d.leader("g2")) !== null, 20_000, "g2 elects its slave");
  // g2 has one broker left, below minInSyncReplicas: it confirms again once the killed one is back.
  await d.restart(target.broker);
  await confirmedAgain(confirmed, "sends are confirmed by g2 again");
  expect(await d.owner(QUEUE)).toBe("g2");
  await finish(d, sending, confirmed);
}, 120_000);

/**
 * The move stops at its fence: the target's master answers MOVE_BEGIN, then its acknowledgements
 * never reach the source (a relay holds them), so the source streams the whole (small) snapshot,
 * fences the queue and waits for the target to hold it all.
 */
async function atTheFence(): Promise<{ d: MoveDeployment; publisher: Client; confirmed: Set<number>; source: MoveBroker; target: MoveBroker; id: string }> {
  const { d, publisher, confirmed } = await setUp(2000, true);
  const source = (await d.leader("g1"))!.broker;
  const target = (await d.leader("g2"))!.broker;
  target.relay!.holdAfterFrame((frame) => Array.isArray(frame) && frame[0] === OP.OK);
  const record = await d.requestMove(QUEUE, "g2");
  await waitFor(() => source.child!.output().includes(`move of "${QUEUE}": fenced at entry`), 20_000, "the source fences the queue");
  target.relay!.holdAfterFrame(null); // clients dialling g2 later go through
  return { d, publisher, confirmed, source, target, id: record.id };
}

it("kill -9 of the source group's master at the fence: its next master rolls the move back, the queue stays on g1, nothing confirmed is lost", async () => {
  const { d, publisher, confirmed, source, id } = await atTheFence();
  await d.kill(source);
  const ended = await moveEnd(d, id);
  expect(ended.state).toBe("rolled-back");
  expect(await d.owner(QUEUE)).toBe("g1");
  await d.restart(source);
  const sending = publish(publisher, confirmed, 1_000_000, 50);
  await confirmedAgain(confirmed, "sends are confirmed on g1 again");
  await finish(d, sending, confirmed);
}, 120_000);

it("kill -9 of the target group's master at the fence: the source rolls the move back and serves the queue again, nothing confirmed is lost", async () => {
  const { d, publisher, confirmed, target, id } = await atTheFence();
  await d.kill(target);
  const ended = await moveEnd(d, id);
  expect(ended.state).toBe("rolled-back");
  expect(await d.owner(QUEUE)).toBe("g1");
  const sending = publish(publisher, confirmed, 1_000_000, 50);
  await confirmedAgain(confirmed, "sends are confirmed on g1 again");
  await finish(d, sending, confirmed);
}, 120_000);
