/**
 * What operators see of a durable queue beyond its memory budget: `paged` and `disk` in
 * GET /queues, and the per-queue disk gauges in GET /metrics.
 */
import { afterEach, expect, it } from "bun:test";
import { adminFixture, type Fixture } from "./_fixture.ts";

let fixture: Fixture;
afterEach(async () => await fixture?.close());

it("GET /queues and GET /metrics show a durable queue's messages on disk and those paged beyond memoryBudgetBytes", async () => {
  fixture = adminFixture({ durability: "fsync", memoryBudgetBytes: 2048 });
  await Promise.all(Array.from({ length: 40 }, (_, n) => fixture.send("orders/v1/1", { n })));
  const { body } = await fixture.request("/queues");
  const orders = body.queues.find((q: { name: string }) => q.name === "orders/v1");
  expect(orders.disk.messages).toBe(40);
  expect(orders.disk.bytes).toBeGreaterThan(40 * 64);
  expect(orders.paged).toBeGreaterThan(30); // a 2 KiB budget holds a few messages
  expect(orders.paged + orders.depth.waiting).toBe(40);
  expect(orders.settings.maxItemsInQueue).toBeNull(); // durable: no count bound (JSON of Infinity)

  const { text } = await fixture.request("/metrics");
  expect(text).toContain(`kitten_mq_queue_disk_messages{queue="orders/v1"} 40`);
  expect(text).toContain(`kitten_mq_queue_disk_bytes{queue="orders/v1"} ${orders.disk.bytes}`);
  expect(text).toContain(`kitten_mq_queue_paged_messages{queue="orders/v1"} ${orders.paged}`);
  expect(text).toMatch(/\nkitten_mq_store_disk_free_bytes \d+\n/);
});

it("a memory queue has nothing on disk and nothing paged", async () => {
  fixture = adminFixture({ durability: "memory" });
  await fixture.send("orders/v1/1", { n: 1 });
  const { body } = await fixture.request("/queues/orders/v1");
  expect(body.disk).toEqual({ messages: 0, bytes: 0 });
  expect(body.paged).toBe(0);
  expect(body.settings.maxItemsInQueue).toBe(1000);
});
