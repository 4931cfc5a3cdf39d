/**
 * A broker killed between a message's commit and its confirmation: the sender resends it after
 * the restart, and the broker recognizes it (the store's newest ids, remembered at start), so it
 * is confirmed without being stored twice, also in a queue that pages, whose start reads only its
 * oldest messages back into memory.
 */
import { expect, it } from "bun:test";
import { join } from "node:path";
import { encode, OP } from "../../src/protocol/mod.ts";
import { kill9, spawnBroker, writeBrokerConfig } from "../helpers/crash.ts";
import { durabilityFixture } from "../helpers/durability.ts";
import { dial, hello, type Wire } from "../helpers/wire.ts";

const { cleanup, temps, children } = durabilityFixture();

const SENDER = "resender";
const COUNT = 2_000;
/** A small budget: after the restart most of the queue stays in the store, read back as it drains. */
const CHANNELS = { "jobs/v1": { memoryBudgetBytes: 4096 } };
const ids = Array.from({ length: COUNT }, (_, n) => `${SENDER}.${n.toString(36)}`);

/** Sends every id to jobs/v1/1 (refs 1…COUNT) and waits until each is confirmed. */
async function sendAll(wire: Wire): Promise<void> {
  ids.forEach((id, n) => wire.send([OP.SEND, n + 1, "jobs/v1/1", id, encode({ n })]));
  const confirmed = new Set<number>();
  while (confirmed.size < COUNT) {
    const answer = await wire.expectAny([OP.OK, OP.ERROR], 10_000);
    if (answer[0] === OP.ERROR) throw new Error(`send refused: ${JSON.stringify(answer)}`);
    for (const ref of answer[1] as number[]) confirmed.add(ref);
  }
}

it("durability: resends after kill -9 of messages stored before it are confirmed, not stored twice, in a queue that pages", async () => {
  const dir = temps.make();
  const child = await spawnBroker(writeBrokerConfig(dir, { channels: CHANNELS }));
  children.push(child);
  const first = await dial(child.port);
  await hello(first, SENDER);
  await sendAll(first);
  await kill9(child); // the journal holds them; the sender acts as if no confirmation had come
  first.close();

  const again = cleanup.broker({ dataDirectory: join(dir, "data"), channels: CHANNELS });
  const queue = again.broker.queues.get("jobs/v1")!;
  expect(queue.held).toBe(COUNT);
  expect(queue.live).toBeLessThan(COUNT / 2); // paged: most are not in memory after the start
  const received = queue.counters.received;
  const resender = await dial(again.port);
  cleanup.defer(() => resender.close());
  await hello(resender, SENDER);
  await sendAll(resender);
  expect(queue.held).toBe(COUNT);
  expect(queue.counters.received).toBe(received); // nothing taken as a new message
});
