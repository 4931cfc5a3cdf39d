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

it("DELETE /queues/:endpoint/:version purges the paged messages too, and of one id only with ?id=", async () => {
  fixture = adminFixture({ durability: "fsync", memoryBudgetBytes: 2048 });
  await Promise.all(Array.from({ length: 40 }, (_, n) => fixture.send(`orders/v1/${n % 2 === 0 ? "even" : "odd"}`, { n })));
  const queue = fixture.server.broker.queues.get("orders/v1")!;
  expect(queue.backlog.count).toBeGreaterThan(30);
  const odd = await fixture.request("/queues/orders/v1?id=odd", { method: "DELETE" });
  expect(odd.body.purged).toBe(20);
  expect(fixture.server.broker.diskUsage("orders/v1").messages).toBe(20);
  const all = await fixture.request("/queues/orders/v1", { method: "DELETE" });
  expect(all.body.purged).toBe(20);
  expect(queue.backlog.count).toBe(0);
  expect(queue.live).toBe(0);
  const { body } = await fixture.request("/queues/orders/v1");
  expect(body.disk.messages).toBe(0);
});
