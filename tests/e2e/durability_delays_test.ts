/**
 * Delayed requeues across a restart: a message nacked with a delay (`done(false, s)`) waits out
 * the rest of its delay after the broker restarts, instead of being delivered at once. The
 * brokers run in process on a clock the test moves, so no test waits for a delay to pass.
 */
import { expect, it } from "bun:test";
import { type Received, recorder, type TestBroker, waitFor } from "../helpers/broker.ts";
import { durabilityFixture, live } from "../helpers/durability.ts";

const { cleanup, temps, inProcess } = durabilityFixture();

/** A clock the test moves by hand (ms since epoch). */
function testClock(start = 1_900_000_000_000) {
  const clock = { t: start, now: () => clock.t };
  return clock;
}

/** Copies of `queue` waiting out a delay on `broker`. */
const delayed = (broker: TestBroker, queue: string) => broker.broker.queues.get(queue)?.depth().delayed ?? 0;

for (const durability of ["fsync", "batch"] as const) {
  it(`durability (${durability}): a message nacked with a delay waits out the rest of it after a restart, then comes with its count`, async () => {
    const data = temps.make();
    const clock = testClock();
    const config = { dataDirectory: data, channels: { "jobs/v1": { durability } } };
    const first = inProcess(config, undefined, clock.now);
    const mq = await cleanup.client(first);
    await mq.send("jobs/v1/1", { n: 1 });
    const held: Received[] = [];
    const nacking = mq.consume("jobs/v1/1", (error, message, done, info) => {
      if (error) return;
      held.push({ message, info: info!, done, at: performance.now() });
      done(false, 60); // try again in a minute
    });
    await nacking.ready;
    await waitFor(() => delayed(first, "jobs/v1") === 1);
    expect(held.length).toBe(1);
    await nacking.close();
    clock.t += 10_000;
    await first.stop(); // commits what is pending
    await mq.disconnect();

    // 10 s of the minute passed before the stop, 5 s more while the broker was down.
    clock.t += 5_000;
    const second = inProcess(config, undefined, clock.now);
    expect(live(second, "jobs/v1")).toBe(1);
    const got: Received[] = [];
    const consumer = await cleanup.client(second);
    await consumer.consume("jobs/v1/1", recorder(got)).ready;
    // A message sent now overtakes it: the consumer is served, and the delayed one is not.
    await consumer.send("jobs/v1/1", { n: 2 });
    await waitFor(() => got.length === 1);
    expect(got[0]!.message).toEqual({ n: 2 });
    expect(delayed(second, "jobs/v1")).toBe(1);

    clock.t += 44_000; // 59 s into the minute: still waiting
    await consumer.send("jobs/v1/1", { n: 3 });
    await waitFor(() => got.length === 2);
    expect(got.map((r) => r.message)).toEqual([{ n: 2 }, { n: 3 }]);
    expect(delayed(second, "jobs/v1")).toBe(1);

    clock.t += 1_000; // the minute is over: the broker's next tick hands it out
    await waitFor(() => got.length === 3);
    expect(got[2]!.message).toEqual({ n: 1 });
    expect(got[2]!.info.messageId).toBe(held[0]!.info.messageId);
    expect(got[2]!.info.nbRequeues).toBe(1);
    await waitFor(() => live(second, "jobs/v1") === 0);
  });
}

it("durability: a delay that is over by the time the broker restarts does not hold the message back", async () => {
  const data = temps.make();
  const clock = testClock();
  const config = { dataDirectory: data };
  const first = inProcess(config, undefined, clock.now);
  const mq = await cleanup.client(first);
  await mq.send("jobs/v1/1", { n: 1 });
  const nacking = mq.consume("jobs/v1/1", (error, _message, done) => {
    if (!error) done(false, 2);
  });
  await nacking.ready;
  await waitFor(() => delayed(first, "jobs/v1") === 1);
  await nacking.close();
  await first.stop();
  await mq.disconnect();

  clock.t += 3_000;
  const second = inProcess(config, undefined, clock.now);
  const got: Received[] = [];
  const consumer = await cleanup.client(second);
  await consumer.consume("jobs/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === 1);
  expect(got[0]!.message).toEqual({ n: 1 });
  expect(delayed(second, "jobs/v1")).toBe(0);
});
