import { afterEach, expect, it } from "bun:test";
import { Cleanup, listenRecorder, type Received, recorder, waitFor } from "../helpers/broker.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

it("e2e: done() acks: the delivery is settled and never redelivered", async () => {
  const broker = cleanup.broker({ requeueInterval: 0.1 });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.consume("ack/v1/1", recorder(got)).ready;
  await mq.send("ack/v1/1", "once");
  await waitFor(() => got.length === 1);
  const queue = broker.broker.queues.get("ack/v1")!;
  await waitFor(() => queue.counters.acked === 1);
  expect(queue.depth()).toEqual({ ready: 0, inflight: 0, delayed: 0, waiting: 0 });
  expect(queue.live).toBe(0);
  // Past the ack timeout (0.1 s) nothing comes back. The window is the subject: a redelivery that
  // does not happen has no event to wait for.
  await Bun.sleep(200);
  expect(got).toHaveLength(1);
  expect(queue.counters.timeout).toBe(0);
});

it("e2e: done(false) requeues at once with info.nbRequeues 1", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.consume("nack/v1/1", (err, message, done, info) => {
    if (err) throw err;
    got.push({ message, info: info!, done, at: performance.now() });
    done(got.length > 1);
  }).ready;
  await mq.send("nack/v1/1", { x: 1 });
  await waitFor(() => got.length === 2);
  expect(got[1]!.message).toEqual({ x: 1 });
  expect(got[1]!.info.messageId).toBe(got[0]!.info.messageId);
  expect(got.map((r) => r.info.nbRequeues)).toEqual([0, 1]);
  expect(got[1]!.at - got[0]!.at).toBeLessThan(500);
  const queue = broker.broker.queues.get("nack/v1")!;
  await waitFor(() => queue.counters.acked === 1);
  expect(queue.counters.nacked).toBe(1);
  expect(queue.live).toBe(0);
});

it("e2e: done(false, 0.2) requeues no earlier than 200 ms later", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.consume("delay/v1/1", (err, message, done, info) => {
    if (err) throw err;
    got.push({ message, info: info!, done, at: performance.now() });
    if (got.length === 1) done(false, 0.2);
    else done();
  }).ready;
  await mq.send("delay/v1/1", "later");
  await waitFor(() => got.length === 1);
  await waitFor(() => broker.broker.queues.get("delay/v1")!.depth().delayed === 1);
  await waitFor(() => got.length === 2, 10_000);
  const elapsed = got[1]!.at - got[0]!.at;
  expect(elapsed).toBeGreaterThanOrEqual(195); // not before the delay
  expect(elapsed).toBeLessThan(10_000); // and not at the ack timeout (100 s)
  expect(got[1]!.info.nbRequeues).toBe(1);
});

it("e2e: a delayed requeue does not hold the consumer's prefetch slot", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  let delayedWhenB = -1;
  await mq.consume("delay2/v1/1", (err, message, done, info) => {
    if (err) throw err;
    got.push({ message, info: info!, done, at: performance.now() });
    if (message === "b") delayedWhenB = broker.broker.queues.get("delay2/v1")!.depth().delayed;
    if (message === "a" && info!.nbRequeues === 0) done(false, 1);
    else done();
  }).ready;
  await mq.send("delay2/v1/1", "a");
  await mq.send("delay2/v1/1", "b");
  await waitFor(() => got.length === 3, 10_000);
  expect(got.map((r) => r.message)).toEqual(["a", "b", "a"]);
  // "b" did not wait for "a"'s delay to end (prefetch is 1, so a held slot would have made it
  // wait): "a" was still delayed when "b" arrived.
  expect(delayedWhenB).toBe(1);
  expect(got[2]!.at - got[0]!.at).toBeGreaterThanOrEqual(995); // "a" came back no earlier than its delay
});

it("e2e: an unacked delivery is redelivered after requeueInterval", async () => {
  const broker = cleanup.broker({ requeueInterval: 0.2 });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.consume("timeout/v1/1", (err, message, done, info) => {
    if (err) throw err;
    got.push({ message, info: info!, done, at: performance.now() });
    if (got.length > 1) done(); // the first delivery is never acked
  }).ready;
  await mq.send("timeout/v1/1", "slow");
  await waitFor(() => got.length === 2, 10_000);
  const elapsed = got[1]!.at - got[0]!.at;
  expect(elapsed).toBeGreaterThanOrEqual(195); // not before requeueInterval
  expect(elapsed).toBeLessThan(10_000);
  expect(got[1]!.info.nbRequeues).toBe(1);
  expect(got[1]!.info.messageId).toBe(got[0]!.info.messageId);
  const queue = broker.broker.queues.get("timeout/v1")!;
  expect(queue.counters.timeout).toBe(1);

  // The late done() of the timed-out delivery is ignored: nothing breaks, nothing is delivered again.
  got[0]!.done();
  await waitFor(() => queue.live === 0);
  expect(got).toHaveLength(2);
});

it("e2e: requeueLimit kills a message after that many deliveries, counted and logged", async () => {
  const broker = cleanup.broker({ requeueLimit: 3, requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.consume("poison/v1/1", (err, message, done, info) => {
    if (err) throw err;
    got.push({ message, info: info!, done, at: performance.now() });
    done(false);
  }).ready;
  await mq.send("poison/v1/1", "poison");
  const queue = broker.broker.queues.get("poison/v1")!;
  await waitFor(() => queue.counters.dead === 1);
  expect(got.map((r) => r.info.nbRequeues)).toEqual([0, 1, 2]);
  const line = broker.logger.lines.find((l) => l.includes("message dead"));
  expect(line).toBeDefined();
  expect(line).toContain(got[0]!.info.messageId);
  expect(line).toContain("queue=poison/v1");
  expect(line).toContain("reason=requeueLimit");
  expect(queue.live).toBe(0);

  // The consumer is not stuck: the next message arrives, and the dead one does not.
  await mq.send("poison/v1/1", "next");
  await waitFor(() => got.length === 4);
  expect(got[3]!.message).toBe("next");
});

it("e2e: requeueLimit also applies to ack timeouts", async () => {
  const broker = cleanup.broker({ requeueLimit: 2, requeueInterval: 0.1 });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.consume("poison2/v1/1", recorder(got, { ack: false })).ready;
  await mq.send("poison2/v1/1", "never acked");
  const queue = broker.broker.queues.get("poison2/v1")!;
  await waitFor(() => queue.counters.dead === 1, 2000);
  expect(got).toHaveLength(2);
  expect(queue.counters.timeout).toBe(2);
  expect(broker.logger.lines.some((l) => l.includes("message dead"))).toBe(true);
});

it("e2e: a listener's automatic ack does not settle a consumer's delivery", async () => {
  const broker = cleanup.broker({ requeueInterval: 0.2 });
  const listener = await cleanup.client(broker);
  const worker = await cleanup.client(broker);
  const heard: Received[] = [];
  const got: Received[] = [];
  await listener.listen("mix/v1/1", listenRecorder(heard)).ready;
  await worker.consume("mix/v1/1", (err, message, done, info) => {
    if (err) throw err;
    got.push({ message, info: info!, done, at: performance.now() });
    if (got.length > 1) done();
  }).ready;
  await listener.send("mix/v1/1", "both");
  await waitFor(() => heard.length === 1 && got.length === 1);
  // The listener's ack lands; the consumer's copy stays in flight and times out on its own.
  await waitFor(() => got.length === 2, 2000);
  expect(got[1]!.info.nbRequeues).toBe(1);
  expect(heard).toHaveLength(1);
  expect(heard[0]!.info.nbRequeues).toBe(0);
});

it("e2e: a requeued message goes to the back of the queue", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  // Queue three messages before the consumer exists, so they are all ready when "a" is nacked.
  await mq.send("back/v1/1", "a");
  await mq.send("back/v1/1", "b");
  await mq.send("back/v1/1", "c");
  await mq.consume("back/v1/1", (err, message, done, info) => {
    if (err) throw err;
    got.push({ message, info: info!, done, at: performance.now() });
    done(!(message === "a" && info!.nbRequeues === 0));
  }).ready;
  await waitFor(() => got.length === 4);
  expect(got.map((r) => r.message)).toEqual(["a", "b", "c", "a"]);
  expect(got[3]!.info.nbRequeues).toBe(1);
});

it("e2e: a message dead by requeueLimit moves to the channel's deadLetter queue when configured", async () => {
  const broker = cleanup.broker({
    requeueInterval: 100,
    channels: { "dlq/v1": { requeueLimit: 1, deadLetter: "dlq-dead/v1" } },
  });
  const mq = await cleanup.client(broker);
  const dead: Received[] = [];
  await mq.consume("dlq-dead/v1/*", recorder(dead)).ready;
  await mq.consume("dlq/v1/7", (err, _message, done) => {
    if (!err) done(false);
  }).ready;
  await mq.send("dlq/v1/7", { poison: true });
  await waitFor(() => broker.broker.queues.get("dlq/v1")?.counters.dead === 1);
  await waitFor(() => dead.length === 1, 1000);
  expect(dead[0]!.message).toEqual({ poison: true });
  expect(dead[0]!.info.channel.endpoint).toBe("dlq-dead");
});
