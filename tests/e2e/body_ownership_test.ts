/**
 * A stored message keeps a copy of its body, not a view of the socket chunk it came in: a view
 * would keep the whole chunk alive for as long as the message waits, and share its bytes.
 */
import { afterEach, expect, it } from "bun:test";
import { Cleanup, waitFor } from "../helpers/broker.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

it("e2e: a waiting message's body is its own copy, not a view of the chunk it was read from", async () => {
  const broker = cleanup.broker();
  const mq = await cleanup.client(broker);
  // Many sends in one burst: they arrive in chunks far larger than one body.
  await Promise.all(Array.from({ length: 200 }, (_, i) => mq.send("own/v1/a", { i })));
  const queue = broker.broker.queues.get("own/v1")!;
  await waitFor(() => queue.live === 200);
  for (const copy of queue.liveCopies()) {
    const body = copy.message.body;
    expect(body.buffer.byteLength).toBe(body.byteLength);
  }
});
