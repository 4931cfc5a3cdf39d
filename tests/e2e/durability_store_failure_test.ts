/**
 * Durability end to end when the store fails: sends are refused with STORE_UNAVAILABLE, what was
 * confirmed is kept and delivered, and the broker recovers once the store works again.
 */
import { expect, it } from "bun:test";
import {
  drain,
  type Received,
  recorder,
  rejection,
  waitFor,
} from "../helpers/broker.ts";
import { memoryLogger } from "../../src/server/log.ts";
import { SqliteStore } from "../../src/server/store/sqlite_store.ts";
import { durabilityFixture, live, numbers, sendAll } from "../helpers/durability.ts";

const { cleanup, temps, inProcess } = durabilityFixture();

// ── store failures ─────────────────────────────────────────────────────────────────────────────

it("durability: while the store fails, sends get STORE_UNAVAILABLE, stored messages are still delivered, and it recovers", async () => {
  const data = temps.make();
  let failing = false;
  const store = new SqliteStore({
    directory: data,
    retryIntervalMs: 20,
    logger: memoryLogger(),
    beforeCommit: () => {
      if (failing) throw new Error("SQLITE_IOERR: simulated");
    },
  });
  const broker = inProcess({ dataDirectory: data }, store);
  const sender = await cleanup.client(broker);
  await sendAll(sender, "jobs/v1/1", [0, 1, 2]);

  failing = true;
  const refused = await rejection(sender.send("jobs/v1/1", { n: "refused-1" }));
  expect(refused.code).toBe("STORE_UNAVAILABLE");
  expect(store.healthy).toBe(false);
  const again = await rejection(sender.send("jobs/v1/1", { n: "refused-2" }));
  expect(again.code).toBe("STORE_UNAVAILABLE");
  expect(live(broker, "jobs/v1")).toBe(3); // never queued

  // Deliveries go on from memory; their acks wait for the disk.
  const got: Received[] = [];
  const consumer = await cleanup.client(broker);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === 3);
  expect(numbers(got)).toEqual([0, 1, 2]);
  expect(store.healthy).toBe(false);

  failing = false;
  await sender.send("jobs/v1/1", { n: 3 });
  await waitFor(() => got.length === 4);
  expect(numbers(got)).toEqual([0, 1, 2, 3]);
  await waitFor(() => store.healthy && store.pending === 0);
  await drain(sender, "jobs/v1/1", got);
  expect(numbers(got)).toEqual([0, 1, 2, 3]); // the refused sends never show up
  await waitFor(() => live(broker, "jobs/v1") === 0 && store.pending === 0); // the marker's ack is in
  await broker.stop();
  await sender.disconnect();
  await consumer.disconnect();

  // Everything was acked, and the refused sends were never written.
  const restarted = cleanup.broker({ dataDirectory: data });
  expect(live(restarted, "jobs/v1")).toBe(0);
});

it("durability: in batch mode a failing store refuses sends, and keeps the ones it confirmed", async () => {
  const data = temps.make();
  let failing = false;
  const store = new SqliteStore({
    directory: data,
    mode: "batch",
    commitIntervalMs: 10,
    retryIntervalMs: 20,
    logger: memoryLogger(),
    beforeCommit: () => {
      if (failing) throw new Error("SQLITE_IOERR: simulated");
    },
  });
  const broker = inProcess({ dataDirectory: data, durability: "batch", commitIntervalMs: 10 }, store);
  const sender = await cleanup.client(broker);
  failing = true;
  await sender.send("jobs/v1/1", { n: 0 }); // batch confirms before the (failing) commit
  await waitFor(() => !store.healthy);
  const refused = await rejection(sender.send("jobs/v1/1", { n: "refused" }));
  expect(refused.code).toBe("STORE_UNAVAILABLE");
  failing = false;
  await waitFor(() => store.healthy && store.pending === 0);
  await sender.send("jobs/v1/1", { n: 1 });
  await broker.stop();
  await sender.disconnect();

  const restarted = cleanup.broker({ dataDirectory: data });
  const got: Received[] = [];
  const consumer = await cleanup.client(restarted);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await waitFor(() => got.length >= 2);
  await drain(consumer, "jobs/v1/1", got);
  expect(numbers(got)).toEqual([0, 1]);
});

it("durability: a message that dies while the store fails is not lost (dead letter not stored)", async () => {
  const data = temps.make();
  let failing = false;
  const store = new SqliteStore({
    directory: data,
    retryIntervalMs: 20,
    logger: memoryLogger(),
    beforeCommit: () => {
      if (failing) throw new Error("SQLITE_IOERR: simulated");
    },
  });
  const channels = { "jobs/v1": { deadLetter: "dead/v1", requeueLimit: 1 } };
  const broker = inProcess({ dataDirectory: data, channels }, store);
  const mq = await cleanup.client(broker);
  await mq.send("jobs/v1/1", { n: 1 }); // confirmed: on disk
  failing = true;
  let refusals = 0;
  await mq.consume("jobs/v1/1", (error, _message, done) => {
    if (error) return;
    refusals++;
    done(false); // past requeueLimit 1: dies into dead/v1, whose append fails
  }).ready;
  await waitFor(() => refusals === 1);
  await waitFor(() => !store.healthy, 2000, "the dead letter's append failed");
  failing = false;
  await waitFor(() => store.healthy && store.pending === 0);
  // The confirmed message must still exist somewhere: in jobs/v1 or in dead/v1.
  expect(live(broker, "jobs/v1") + live(broker, "dead/v1")).toBe(1);
  await broker.stop();
  await mq.disconnect();
  const restarted = cleanup.broker({ dataDirectory: data, channels });
  expect(live(restarted, "jobs/v1") + live(restarted, "dead/v1")).toBe(1);
});
