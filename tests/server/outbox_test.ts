import { afterEach, expect, it } from "bun:test";
import { parseConfig } from "../../src/server/config/config.ts";
import { type Connection, Outbox } from "../../src/server/outbox.ts";

const outboxes: Outbox[] = [];
afterEach(() => outboxes.splice(0).forEach((outbox) => outbox.discard())); // clears the grace timer

/** An outbox whose socket takes nothing (a peer that does not read); counts pause() calls. */
function stalled(isPeer: boolean, slow: (unsent: number) => void = () => {}): { outbox: Outbox; paused: () => number } {
  const config = parseConfig({ durability: "memory", socketServer: { maxOutgoingBytes: 65536, slowConsumerGraceMs: 100 } });
  let paused = 0;
  const connection: Connection = { write: () => 0, end() {}, pause: () => void paused++, resume() {}, remoteAddress: "test" };
  const outbox = new Outbox(connection, { config, isPeer, slowConsumer: slow });
  outboxes.push(outbox);
  return { outbox, paused: () => paused };
}

const FRAMES = new Uint8Array(70_000); // one write past maxOutgoingBytes

it("Outbox stops reading a client whose unsent bytes pass maxOutgoingBytes", () => {
  const { outbox, paused } = stalled(false);
  outbox.batch.pushFramed(FRAMES);
  expect(outbox.write(false)).toBe(true);
  expect(outbox.unsentBytes).toBe(70_000);
  expect(outbox.readPaused).toBe(true);
  expect(paused()).toBe(1);
});

it("Outbox keeps reading a cluster peer past maxOutgoingBytes: its replication stream has its own window", () => {
  const { outbox, paused } = stalled(true);
  outbox.batch.pushFramed(FRAMES);
  outbox.write(false);
  expect(outbox.unsentBytes).toBe(70_000);
  expect(outbox.readPaused).toBe(false);
  expect(paused()).toBe(0);
});

it("Outbox reports a client that does not read within slowConsumerGraceMs, with its unsent bytes", async () => {
  const reported = Promise.withResolvers<number>();
  const { outbox } = stalled(false, (unsent) => reported.resolve(unsent));
  outbox.batch.pushFramed(FRAMES);
  outbox.write(false);
  expect(await reported.promise).toBe(70_000);
  expect(outbox.readPaused).toBe(false);
});

it("Outbox writes nothing for an empty batch, and the burst's confirmations as one OK frame", () => {
  const written: Uint8Array[] = [];
  const connection: Connection = { write: (bytes) => (written.push(bytes.slice()), bytes.length), end() {}, remoteAddress: "test" };
  const outbox = new Outbox(connection, { config: parseConfig({ durability: "memory" }), isPeer: false, slowConsumer() {} });
  expect(outbox.write(false)).toBe(false);
  outbox.confirm(1);
  outbox.confirm(2);
  expect(outbox.write(false)).toBe(true);
  expect(written.length).toBe(1);
  expect(outbox.unsentBytes).toBe(0);
});

it("Outbox sends what waited when the socket drains, and reads the client again", () => {
  let accepting = false;
  let resumed = 0;
  const written: number[] = [];
  const connection: Connection = {
    write: (bytes) => (accepting ? (written.push(bytes.length), bytes.length) : 0),
    end() {},
    pause() {},
    resume: () => void resumed++,
    remoteAddress: "test",
  };
  const config = parseConfig({ durability: "memory", socketServer: { maxOutgoingBytes: 65536 } });
  const outbox = new Outbox(connection, { config, isPeer: false, slowConsumer: () => expect.unreachable() });
  outboxes.push(outbox);
  outbox.batch.pushFramed(FRAMES);
  outbox.write(false);
  expect(outbox.readPaused).toBe(true);
  expect(outbox.drain()).toBe(false); // the socket still takes nothing
  accepting = true;
  expect(outbox.drain()).toBe(true);
  expect(written).toEqual([70_000]);
  expect(outbox.unsentBytes).toBe(0);
  expect(outbox.readPaused).toBe(false);
  expect(resumed).toBe(1);
});
