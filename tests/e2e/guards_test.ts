/**
 * Engine code runs from socket callbacks and from the broker's tick. A bug there is logged and the
 * broker goes on serving: it must not end the process nor strand other clients' answers.
 */
import { afterEach, expect, it } from "bun:test";
import { Cleanup, waitFor } from "../helpers/broker.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

it("e2e: a tick that throws is logged and the broker keeps serving", async () => {
  const broker = cleanup.broker();
  const tick = broker.broker.tick;
  let failures = 0;
  broker.broker.tick = () => {
    failures++;
    throw new Error("tick bug");
  };
  await waitFor(() => failures >= 2); // the timer survived its first throw
  expect(broker.logger.lines.some((line) => line.includes("tick failed") && line.includes("tick bug"))).toBe(true);
  broker.broker.tick = tick;
  const mq = await cleanup.client(broker);
  await mq.send("guard/v1/a", { ok: true });
  let got: unknown = null;
  await mq.consume("guard/v1/a", (_error, message, done) => {
    got = message;
    done();
  }).ready;
  await waitFor(() => got !== null);
  expect(got).toEqual({ ok: true });
});

it("e2e: a session whose flush throws does not strand the answers of the sessions flushed after it", async () => {
  const broker = cleanup.broker();
  const first = await cleanup.client(broker, { clientId: "first" });
  const second = await cleanup.client(broker, { clientId: "second" });
  expect(first.status()[0]?.connected).toBe(true);
  const [a, b] = [...broker.broker.sessions];
  let flushedB = 0;
  a!.flush = () => {
    throw new Error("flush bug");
  };
  const flushB = b!.flush.bind(b);
  b!.flush = () => {
    flushedB++;
    flushB();
  };
  broker.broker.markDirty(a!);
  broker.broker.markDirty(b!);
  expect(() => broker.broker.flush()).not.toThrow();
  expect(flushedB).toBe(1);
  broker.broker.flush(); // nothing left marked: b is not flushed again
  expect(flushedB).toBe(1);
  expect(broker.logger.lines.some((line) => line.includes("flush failed") && line.includes("flush bug"))).toBe(true);
  expect(second.status()[0]?.connected).toBe(true);
});
