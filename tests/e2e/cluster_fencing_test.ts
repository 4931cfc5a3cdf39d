/**
 * Several brokers end to end, when two claim master: the fenced old master, epochs that keep
 * rising across failovers, and two masters with the same epoch (TWO_MASTERS). Setup:
 * tests/helpers/cluster.ts.
 */
import { expect, it } from "bun:test";
import { type Received, recorder, sleep, waitFor } from "../helpers/broker.ts";
import {
  allConnected,
  clusterFixture,
  codes,
  distinct,
  numbers,
  range,
} from "../helpers/cluster.ts";

const { cluster, clusterClient } = clusterFixture();

// ── fencing ──────────────────────────────────────────────────────────────────────────────────

it("cluster: an old master that comes back still claiming master is fenced — it delivers nothing, the new one keeps delivering", async () => {
  const [a, b, c] = cluster(3, { durability: "fsync" });
  const hosts = [a!.host, b!.host, c!.host];
  const first = await clusterClient(hosts);
  await allConnected(first.mq);
  // Five messages nobody consumes yet: every broker stores them, a included.
  await Promise.all(range(0, 5).map((n) => first.mq.send("fence/v1/x", { n })));
  for (const node of [a!, b!, c!]) await waitFor(() => node.live("fence/v1") === 5);
  await first.mq.disconnect();

  await a!.stop(); // the master goes away (crash, partition)…
  b!.promote(); // …and the operator promotes b: epoch 1
  expect(b!.broker.epoch).toBe(1);
  const { mq: consumer, errors, masters } = await clusterClient(hosts);
  const got: Received[] = [];
  await consumer.consume("fence/v1/*", recorder(got)).ready;
  await waitFor(() => got.length === 5);
  expect(masters.at(-1)).toEqual({ host: b!.host, epoch: 1 });

  // a comes back as it was: isMaster true, epoch 0, its store still holding the five messages
  // (their acks were mirrored while it was away). The consumer is the only client to reach it:
  // it must tell a (FENCE) before a hands it anything.
  a!.start();
  expect(a!.broker.epoch).toBe(0);
  expect(a!.live("fence/v1")).toBe(5);
  await waitFor(() => codes(errors).includes("FENCED"), 3000, "the client reports FENCED");
  await waitFor(() => a!.logger.lines.some((line) => line.includes("fenced")), 2000, 'a logs "fenced"');
  await waitFor(() => consumer.status()[0]!.role === "slave", 2000, "a now says slave");
  expect(consumer.status()[0]).toMatchObject({ host: a!.host, connected: true, master: false });

  // b keeps delivering; a delivers nothing, not even the five messages it restored.
  const { mq: publisher } = await clusterClient(hosts);
  await allConnected(publisher);
  await Promise.all(range(5, 15).map((n) => publisher.send("fence/v1/x", { n })));
  await waitFor(() => distinct(got).size === 15);
  // The window is the subject: a stray delivery from a (a negative) has no event to wait for.
  await sleep(100);
  expect(b!.deliveries).toBeGreaterThanOrEqual(15);
  expect(c!.deliveries).toBe(0);
  expect(numbers(got).toSorted((x, y) => x - y)).toEqual(range(0, 15));
  expect(a!.deliveries).toBe(0);
});

it("cluster: after two failovers the epoch keeps rising — the first promoted master, back still claiming master, is fenced", async () => {
  const [a, b, c] = cluster(3, { durability: "fsync" });
  const hosts = [a!.host, b!.host, c!.host];
  const { mq, errors } = await clusterClient(hosts);
  await allConnected(mq);
  const got: Received[] = [];
  await mq.consume("epoch/v1/*", recorder(got)).ready;

  await a!.stop();
  b!.promote(); // epoch 1
  await waitFor(() => mq.status()[1]!.master);
  await b!.stop();
  c!.promote(); // must be above every epoch the cluster has used: 2
  await waitFor(() => mq.status()[2]!.master);
  expect(c!.broker.epoch).toBeGreaterThan(1);

  b!.start(); // back, still isMaster true with epoch 1
  await waitFor(() => mq.status()[1]!.connected);
  await waitFor(() => codes(errors).includes("FENCED"), 3000).catch(() => {});
  expect(codes(errors)).toContain("FENCED");
  expect(codes(errors)).not.toContain("TWO_MASTERS");
  await mq.send("epoch/v1/x", { n: 1 });
  await waitFor(() => got.length === 1);
  expect(b!.deliveries).toBe(0);
});

it("cluster: two masters with the same epoch are reported (TWO_MASTERS)", async () => {
  const [a, b] = cluster(2);
  b!.promote(); // epoch 1 on b…
  const [c] = cluster(1); // …and a fresh master c, also reaching epoch 1 by one promotion
  await c!.stop();
  c!.overrides = { ...c!.overrides, isMaster: false };
  c!.start();
  c!.promote();
  expect([b!.broker.epoch, c!.broker.epoch]).toEqual([1, 1]);
  const { mq, errors } = await clusterClient([a!.host, b!.host, c!.host]);
  await allConnected(mq);
  await waitFor(() => codes(errors).includes("TWO_MASTERS"), 2000, "TWO_MASTERS reported");
  const report = errors.find((e) => e.code === "TWO_MASTERS")!;
  expect(report.message).toContain(b!.host);
  expect(report.message).toContain(c!.host);
  // a (epoch 0) is below them: fenced.
  expect(codes(errors)).toContain("FENCED");
});

it("cluster: two masters with epoch 0 (both configured isMaster true) are reported (TWO_MASTERS)", async () => {
  const [a] = cluster(1);
  const [b] = cluster(1);
  const { errors } = await clusterClient([a!.host, b!.host]);
  await waitFor(() => codes(errors).includes("TWO_MASTERS"), 2000, "TWO_MASTERS reported");
});
