/**
 * Catch-up from a position when brokers die with kill -9 (subprocess brokers, fsync,
 * minInSyncReplicas 2): a master killed while a slave catches up from its position, a slave left
 * ahead of the master elected after a kill, slaves whose position the master cannot serve, and a
 * snapshot cut short by the kill of the slave receiving it. Every test counts what was confirmed
 * against what a consumer gets in the end (nothing may be lost) and checks which catch-up each
 * slave got, from the brokers' GET /status and their log lines.
 */
import { expect, it } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { waitFor } from "../helpers/broker.ts";
import { NO_POSITION, Proc, acknowledged, brokersOf, client, etcd, expectNoneLost, inSync, lostOf, masterAmong, plansFor, relayTo, sender, startAll, threeInSync } from "../helpers/crash_cluster.ts";

// ── (a) the master killed while a slave catches up from its position ─────────────────────────

it("catch-up after kill -9: the master killed while a slave catches up from its position — etcd elects another, the slave resumes from it, nothing confirmed is lost", async () => {
  const endpoints = await etcd();
  const procs = await brokersOf(3, {}, { etcd: endpoints });
  const [b0, b1, late] = procs as [Proc, Proc, Proc];
  // b0 and b1 first, so that one of them is elected; the third reaches that one through a relay.
  await startAll([b0, b1]);
  const first = await masterAmong([b0, b1]);
  const next = first === b0 ? b1 : b0;
  const toFirst = await relayTo(first);
  late.peers = [toFirst.host(first.name), next.host];
  await late.start();
  await inSync(first, [next.name, late.name]);
  const queue = "resume/v1";
  const publisher = sender(await client(procs.map((p) => p.host)), queue);
  await publisher.sendAll(0, 3_000);
  await acknowledged(first);

  await late.kill();
  await publisher.sendAll(3_000, 9_000); // a backlog of 6,000, confirmed by the master and `next`
  // Back, it catches up from its position; only the first 100 kB of it reach it (the relay holds the rest).
  toFirst.holdAfter(100_000);
  await late.start();
  await waitFor(() => toFirst.held >= 1 && plansFor(first, late.name).length === 2, 10_000, "the catch-up from a position halfway");
  expect(plansFor(first, late.name)).toEqual([NO_POSITION, "position"]);
  const halfway = (await first.replica(late.name))!;
  expect(halfway.state).toBe("catching-up");
  await waitFor(async () => (await late.status()).cluster.upstream!.ackedIndex > 0, 5_000, "part of it stored");

  await first.kill();
  toFirst.holdAfter(null);
  toFirst.cut();
  // etcd elects `next`: the in-sync set recorded holds the master and `next` only.
  await waitFor(async () => (await next.statusOrNull())?.role === "master", 15_000, `${next.name} elected`);
  await inSync(next, [late.name]);
  expect(plansFor(next, late.name)).toEqual(["position"]);
  expect(late.output()).toMatch(/catching up from index \d+;\d+ entries to receive\n[^]*catching up from index \d+;\d+ entries to receive/);
  expect((await next.replica(late.name))?.catchUp).toBe("position");
  await publisher.sendAll(9_000, 10_000); // confirmed by `next` and `late`: it is in sync
  await publisher.settled();

  await first.start(); // the old master comes back as a slave, and resumes from its position too
  await inSync(next, [first.name, late.name]);
  expect(plansFor(next, first.name)).toEqual(["position"]);
  expect((await next.status()).cluster.log).toMatchObject({ positionCatchUps: 2, snapshotsSent: 0 });
  await acknowledged(next);
  expect([await next.stored(queue), await late.stored(queue), await first.stored(queue)]).toEqual([10_000, 10_000, 10_000]);

  expect(publisher.confirmed.size).toBe(10_000);
  await expectNoneLost(publisher, procs.map((p) => p.host), queue);
}, 60_000);

// ── (b) a slave ahead of the next master ───────────────────────────────────────────────────

it("catch-up after kill -9: a slave that got entries the next master never had goes back to where their logs part, and nothing confirmed is lost", async () => {
  const procs = await brokersOf(3, { cluster: { maxLagMs: 30_000 } }); // b1 stays in sync while its link is frozen
  const [b0, b1, b2] = procs as [Proc, Proc, Proc];
  const toB0 = await relayTo(b0);
  b1.peers = [toB0.host("b0"), b2.host]; // b1's stream from b0 goes through the relay
  await startAll(procs);
  await inSync(b0, ["b1", "b2"]);
  const queue = "ahead/v1";
  const publisher = sender(await client(procs.map((p) => p.host)), queue);
  await publisher.sendAll(0, 2_000);
  await acknowledged(b0);

  // b1 hears nothing more from b0, and is still in sync: the master waits for it.
  toB0.freeze();
  const b1Index = (await b1.status()).cluster.log.index;
  publisher.start(2_000, 2_500);
  await waitFor(async () => (await b2.status()).cluster.log.index >= b1Index + 500, 10_000, "b2 holds 500 entries more than b1");
  expect(publisher.confirmed.size).toBe(2_000); // none of them is confirmed: b1 does not hold them
  expect((await b1.status()).cluster.log.index).toBe(b1Index);

  await b0.kill();
  toB0.cut();
  b0.demote();
  await b1.promote(); // in sync with b0 when it died: no force needed
  await inSync(b1, ["b2"]);
  expect(plansFor(b1, "b2")).toEqual(["position"]);
  expect((await b1.replica("b2"))?.catchUp).toBe("position");
  const back = /went back to index (\d+): dropped (\d+) messages the master does not hold/.exec(b2.output());
  expect(back).not.toBeNull();
  expect(Number(back![1])).toBe(b1Index);
  expect(Number(back![2])).toBe(500);

  // The client sends the 500 again: b1 streams them (it held them from the client only) before it confirms them.
  await publisher.settled();
  expect(publisher.confirmed.size).toBe(2_500);
  await b0.start();
  await inSync(b1, ["b0", "b2"]);
  expect((await b1.status()).cluster.log).toMatchObject({ snapshotsSent: 0 });
  await acknowledged(b1);
  expect([await b1.stored(queue), await b2.stored(queue), await b0.stored(queue)]).toEqual([2_500, 2_500, 2_500]);

  await expectNoneLost(publisher, procs.map((p) => p.host), queue);
}, 30_000);

// ── (c) a position the master cannot serve ───────────────────────────────────────────────────

it("catch-up after kill -9: a slave whose data folder was replaced gets a snapshot, with the reason logged, and holds what the master holds", async () => {
  const queue = "wiped/v1";
  const { procs: [b0, b1, b2], publisher } = await threeInSync(queue, 3_000);

  // First a kill -9 with the folder kept: the slave resumes from its position.
  await b2.kill();
  await publisher.sendAll(3_000, 3_500); // b0 and b1 confirm
  await b2.start();
  await inSync(b0, ["b1", "b2"]);
  expect(plansFor(b0, "b2")).toEqual([NO_POSITION, "position"]); // its first start had no store either
  expect((await b0.replica("b2"))?.catchUp).toBe("position");

  // Then a kill -9 and a new, empty data folder: no store, no position.
  await b2.kill();
  rmSync(join(b2.dir, "data"), { recursive: true, force: true });
  await publisher.sendAll(3_500, 4_000);
  await b2.start();
  await inSync(b0, ["b1", "b2"]);
  expect(plansFor(b0, "b2")).toEqual([NO_POSITION, "position", NO_POSITION]);
  expect((await b0.replica("b2"))?.catchUp).toBe("snapshot");
  expect((await b0.status()).cluster.log).toMatchObject({ positionCatchUps: 1, snapshotsSent: 3 }); // b1's and b2's first starts, and this one
  await acknowledged(b0);
  expect(await b0.stored(queue)).toBe(4_000);
  expect(await b2.stored(queue)).toBe(4_000);

  await expectNoneLost(publisher, [b0.host, b1.host, b2.host], queue);
}, 30_000);

it("catch-up after kill -9: a slave killed before its master restarted is older than the log that master kept, and gets a snapshot saying so", async () => {
  const queue = "tail/v1";
  const { procs: [b0, b1, b2], publisher } = await threeInSync(queue, 2_000);

  await b1.kill(); // its saved position is at index 2,000 at most
  await publisher.sendAll(2_000, 3_000); // b0 and b2 confirm
  await acknowledged(b0);
  const index = (await b0.status()).cluster.log.index;
  // A restart keeps none of the log's entries, only the position saved on the way out (here all of it).
  await b0.stop();
  await b0.start();
  await inSync(b0, ["b2"]);
  expect((await b0.status()).cluster.log).toMatchObject({ index, retainedFrom: index + 1, retainedBytes: 0 });
  expect(plansFor(b0, "b2").at(-1)).toBe("position");

  await b1.start();
  await inSync(b0, ["b1", "b2"]);
  expect(plansFor(b0, "b1").at(-1)).toMatch(
    new RegExp(`^snapshot: this master keeps the log after index ${index} only, and the slave is at index \\d+$`),
  );
  expect((await b0.replica("b1"))?.catchUp).toBe("snapshot");
  expect(b1.output()).toMatch(/catching up from index \d+\n/); // it did send a position: the master could not serve it

  await publisher.sendAll(3_000, 3_200); // confirmed by all three again
  await acknowledged(b0);
  expect([await b0.stored(queue), await b1.stored(queue), await b2.stored(queue)]).toEqual([3_200, 3_200, 3_200]);
  await expectNoneLost(publisher, [b0.host, b1.host, b2.host], queue);
}, 30_000);

// ── (d) a snapshot cut short by the kill of the slave receiving it ───────────────────────────

it("catch-up after kill -9: a slave killed halfway through its snapshot completes its catch-up after a restart, and holds each message once", async () => {
  const procs = await brokersOf(3, { memoryBudgetBytes: 65_536 }); // the master reads most of the snapshot from its store
  const [b0, b1, b2] = procs as [Proc, Proc, Proc];
  const toB0 = await relayTo(b0);
  b1.peers = [toB0.host("b0"), b2.host];
  await startAll([b0, b2]);
  await inSync(b0, ["b2"]);
  const queue = "cut/v1";
  const publisher = sender(await client([b0.host, b2.host]), queue);
  await publisher.sendAll(0, 20_000);

  // b1 is new: a snapshot of 20,000 messages, of which only the first 500 kB reach it.
  toB0.holdAfter(500_000);
  await b1.start();
  await waitFor(() => toB0.held >= 1, 10_000, "the snapshot halfway");
  await waitFor(async () => (await b1.status()).cluster.upstream!.snapshotReceived > 1_000, 10_000, "part of the snapshot received");
  const upstream = (await b1.status()).cluster.upstream!;
  expect(upstream).toMatchObject({ state: "catching-up", catchUp: null }); // no SYNCED yet
  expect(upstream.snapshotReceived).toBeLessThan(20_000);
  await b1.kill();
  await waitFor(async () => (await b0.replica("b1")) === undefined, 5_000, "b1's link closed on b0");

  toB0.holdAfter(null);
  await b1.start(); // its store holds part of the snapshot, and no position
  await inSync(b0, ["b1", "b2"], 30_000);
  expect(plansFor(b0, "b1")).toEqual([NO_POSITION, NO_POSITION]);
  expect((await b0.status()).cluster.log.snapshotsSent).toBe(3); // b2's first start, and b1's two
  await publisher.sendAll(20_000, 20_100); // confirmed by all three
  await acknowledged(b0);
  expect([await b0.stored(queue), await b1.stored(queue), await b2.stored(queue)]).toEqual([20_100, 20_100, 20_100]);

  await expectNoneLost(publisher, [b0.host, b1.host], queue);
}, 60_000);

// ── a master restarted after kill -9 ───────────────────────────────────────────────────────

// A master saves its replication position about once a second; restarted after kill -9 it knows
// only that its log went on past that index. Its in-sync slave is ahead of it: told to go back
// there, it would drop messages of entries after it that were confirmed. The restarted master goes
// on in a new epoch and sends that slave a snapshot, and a resend of a message it holds waits for
// the in-sync set; promoted, the slave holds every confirmed message.
it("catch-up after kill -9: a master killed -9 mid-stream and restarted leaves its in-sync slave holding every message it confirmed", async () => {
  const procs = await brokersOf(2);
  const [b0, b1] = procs as [Proc, Proc];
  await startAll(procs);
  await inSync(b0, ["b1"]);
  const queue = "restart/v1";
  const publisher = sender(await client(procs.map((p) => p.host)), queue);
  // 200 sends at a time, each batch once the last is confirmed: confirmations go on until the kill.
  let sending = true;
  const stream = (async () => {
    for (let n = 0; sending; n += 200) await publisher.sendAll(n, n + 200);
  })();
  await waitFor(() => publisher.confirmed.size >= 2_000, 10_000, "2,000 confirmed");
  await b0.kill(); // mid-stream: its position was saved up to a second ago
  sending = false;
  await b0.start(); // master again, as its config says
  await inSync(b0, ["b1"]);
  await stream; // the batch cut off by the kill is sent again and confirmed
  await publisher.settled();
  await acknowledged(b0);
  const total = publisher.confirmed.size;
  const held = { b0: await b0.stored(queue), b1: await b1.stored(queue) };
  expect(b0.output()).toContain("the last run did not stop cleanly");
  expect(b0.output()).toContain("because this master restarted after a run that did not stop cleanly");

  // b0 is gone for good: the operator promotes its in-sync slave.
  await b0.kill();
  await b1.promote();
  expect(await lostOf([b1.host], queue, publisher.confirmed, 5_000)).toEqual([]);
  expect(held).toEqual({ b0: total, b1: total });
}, 30_000);
