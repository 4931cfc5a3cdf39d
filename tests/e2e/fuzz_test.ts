/**
 * The bounded session-level fuzz (the long one is `bun scripts/fuzz.ts --inputs 2000000 --seed 1`):
 * random and mutated frames through the real broker Session; only coded ERROR frames (never
 * INTERNAL) may come back, fatal codes close, nothing is left behind, and the broker still serves.
 * Plus the regressions the fuzz found, as plain end-to-end tests.
 */
import { afterEach, expect, it } from "bun:test";
import { runSessionFuzz, summary } from "../../scripts/fuzz.ts";
import { Cleanup, type Received, recorder, waitFor } from "../helpers/broker.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

it("e2e: fuzz: 15k seeded inputs through the broker session get only coded errors, and the broker keeps serving", async () => {
  const report = await runSessionFuzz({ inputs: 15_000, seed: 20260101 });
  // The summary names the seed and the failing inputs (hex), to replay with scripts/fuzz.ts.
  expect(report.failures).toEqual([]);
  expect(report.errorCodes.INTERNAL).toBeUndefined();
  // The fuzz reached past the handshake: registrations, deliveries and confirmations happened.
  expect(report.framesOut.DELIVER).toBeGreaterThan(100);
  expect(report.framesOut.OK).toBeGreaterThan(100);
  expect(report.handshakes).toBeGreaterThan(10);
  if (report.failures.length > 0) console.error(summary(report));
}, 15_000);

it("e2e: fuzz regression: an unacked delivery of a handler whose ids were all removed is requeued when it unsubscribes", async () => {
  const broker = cleanup.broker({ requeueInterval: 0.3 });
  const leaving = await cleanup.client(broker);
  const held: Received[] = [];
  const sub1 = leaving.consume("orphan/v1/1", recorder(held, { ack: false })); // never acks
  const sub2 = leaving.consume("orphan/v1/9", recorder([]));
  await Promise.all([sub1.ready, sub2.ready]);
  const sender = await cleanup.client(broker);
  await sender.send("orphan/v1/1", "must not be lost");
  await waitFor(() => held.length === 1);
  await sub1.removeId("1"); // sub1 now has no id, and still holds the delivery
  await sub2.close(); // the last indexed handler of the consumer group leaves
  await sub1.close(); // its unacked delivery must be requeued at once
  const queue = broker.broker.queues.get("orphan/v1")!;
  const staying = await cleanup.client(broker);
  const got: Received[] = [];
  await staying.consume("orphan/v1/1", recorder(got)).ready;
  // At once, or at the latest after the ack timeout (0.3 s).
  await waitFor(() => got.length === 1, 1500, "the requeued message at the new consumer");
  expect(got[0]!.message).toBe("must not be lost");
  await waitFor(() => queue.depth().inflight === 0);
});
