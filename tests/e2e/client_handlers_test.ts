/**
 * The client's handlers and listeners end to end: a handler or an event listener that throws is
 * reported, and the message comes back or the link still works.
 */
import { afterEach, expect, it, spyOn } from "bun:test";
import { client, KittenError } from "../../mod.ts";
import { OP } from "../../src/protocol/mod.ts";
import { testKeysDirectory } from "../helpers/keys.ts";
import {
  Cleanup,
  fastReconnect,
  freePort,
  type Received,
  recorder,
  sleep,
  startTestBroker,
  uniqueClientId,
  waitFor,
} from "../helpers/broker.ts";
import { dial, hello } from "../helpers/wire.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

it("e2e: client consume handler that throws gets the message again and reports 'error'", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  const errors: Error[] = [];
  mq.on("error", (error) => errors.push(error));
  const got: Received[] = [];
  await mq.consume("throw/v1/1", (err, message, done, info) => {
    if (err) return;
    got.push({ message, info: info!, done, at: performance.now() });
    if (got.length === 1) throw new Error("handler bug");
    done();
  }).ready;
  await mq.send("throw/v1/1", "retry me");
  await waitFor(() => got.length === 2);
  expect(got[1]!.info.nbRequeues).toBe(1);
  expect(errors.map((e) => e.message)).toEqual(["handler bug"]);
});

it("e2e: client listen handler whose promise rejects gets the message again", async () => {
  const broker = cleanup.broker({ requeueInterval: 100 });
  const mq = await cleanup.client(broker);
  mq.on("error", () => {});
  const got: Received[] = [];
  await mq.listen("throw2/v1/1", async (err, message, info) => {
    if (err) return;
    got.push({ message, info: info!, done: () => {}, at: performance.now() });
    if (got.length === 1) throw new Error("async handler bug");
  }).ready;
  await mq.send("throw2/v1/1", "again");
  await waitFor(() => got.length === 2);
  expect(got[1]!.info.nbRequeues).toBe(1);
  await waitFor(() => broker.broker.queues.get("throw2/v1")!.live === 0);
});

it("e2e: a handler that throws on its registration error is reported, and the client keeps working", async () => {
  const broker = cleanup.broker();
  const mq = cleanup.add(client());
  const errors: string[] = [];
  mq.on("error", (error: Error) => errors.push(error.message));
  await mq.connect({ hosts: [broker.host], clientId: uniqueClientId(), keysDirectory: testKeysDirectory });
  mq.listen("*/v1/1", () => {
    throw new Error("handler threw on its error");
  });
  const got: Received[] = [];
  const worker = mq.consume("after-throw/v1/1", recorder(got));
  await worker.ready;
  await mq.send("after-throw/v1/1", "still delivered");
  await waitFor(() => got.length === 1 && errors.length > 0);
  expect(errors).toContain("handler threw on its error");
  expect(got[0]!.message).toBe("still delivered");
});

for (const event of ["connect", "master"] as const) {
  it(`e2e: client '${event}' listener that throws is reported, and the link still opens: connect() resolves, sends are confirmed`, async () => {
    const broker = cleanup.broker();
    const mq = cleanup.add(client());
    const errors: string[] = [];
    mq.on("error", (error: Error) => errors.push(error.message));
    mq.on(event, () => {
      throw new Error(`${event} listener bug`);
    });
    const connecting = mq.connect({ hosts: [broker.host], clientId: uniqueClientId(), keysDirectory: testKeysDirectory });
    const outcome = await Promise.race([
      connecting.then(() => "connected", (error: Error) => `rejected: ${error.message}`),
      sleep(10_000).then(() => "still pending after 10 s"),
    ]);
    expect(outcome).toBe("connected");
    const got: Received[] = [];
    await mq.consume("open-throw/v1/1", recorder(got)).ready;
    await mq.send("open-throw/v1/1", "after the throw");
    await waitFor(() => got.length === 1);
    expect(errors).toEqual([`${event} listener bug`]);
    expect(mq.isConnected()).toBe(true);
  });
}

it("e2e: client 'disconnect' listener that throws is reported, and the client still reconnects", async () => {
  const port = await freePort();
  const first = cleanup.add(startTestBroker({ socketServer: { port } }));
  const mq = await cleanup.client(first, fastReconnect);
  const errors: string[] = [];
  mq.on("error", (error: Error) => errors.push(error.message));
  mq.on("disconnect", () => {
    throw new Error("disconnect listener bug");
  });
  await first.stop();
  await waitFor(() => errors.includes("disconnect listener bug"));
  cleanup.add(startTestBroker({ socketServer: { port } }));
  await waitFor(() => mq.isConnected());
  await mq.send("close-throw/v1/1", "after the throw");
});

it("e2e: client 'error' listener that throws does not hold back the NACK of a failed handler (requeued at once)", async () => {
  const console_ = spyOn(console, "error").mockImplementation(() => {});
  cleanup.defer(() => console_.mockRestore());
  const broker = cleanup.broker(); // requeueInterval 100 s: only a NACK brings the message back in time
  const mq = await cleanup.client(broker);
  mq.on("error", () => {
    throw new Error("error listener bug");
  });
  const got: Received[] = [];
  await mq.consume("nack-first/v1/1", (err, message, done, info) => {
    if (err) return;
    got.push({ message, info: info!, done, at: performance.now() });
    if (got.length === 1) throw new Error("handler bug");
    done();
  }).ready;
  await mq.send("nack-first/v1/1", "retry me");
  await waitFor(() => got.length === 2);
  expect(got[1]!.info.nbRequeues).toBe(1);
  expect(console_).toHaveBeenCalled();
});

it("e2e: client 'error' listener that throws does not hold back the NACK of an undecodable message", async () => {
  const console_ = spyOn(console, "error").mockImplementation(() => {});
  cleanup.defer(() => console_.mockRestore());
  const broker = cleanup.broker({ requeueLimit: 3 });
  const mq = await cleanup.client(broker);
  let reports = 0;
  mq.on("error", (error: KittenError) => {
    if (error.code === "BAD_FORMAT") reports++;
    throw new Error("error listener bug");
  });
  await mq.consume("undecodable/v1/1", () => {}).ready;
  const wire = await dial(broker.port);
  cleanup.defer(() => wire.close());
  await hello(wire, uniqueClientId());
  wire.send([OP.SEND, 1, "undecodable/v1/1", "raw-1", new Uint8Array([0xff])]); // 0xff: a CBOR "break" alone
  await wire.expect(OP.OK);
  await waitFor(() => reports >= 2); // delivered, NACKed, delivered again: no 100 s ack timeout between
});
