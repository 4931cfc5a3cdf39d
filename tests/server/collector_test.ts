/**
 * The garbage collector's nudges (collector.ts) and the pager's (queue/pager.ts): a collection
 * paced by what it costs, and one every PAGED_PER_COLLECTION sends a durable queue pages.
 */
import { describe, expect, it } from "bun:test";
import { COLLECT_INTERVAL_MS, PacedCollection } from "../../src/server/collector.ts";
import { Message } from "../../src/server/queue/message.ts";
import { PAGED_PER_COLLECTION, Pager, type PagerHost } from "../../src/server/queue/pager.ts";
import type { PagingStore } from "../../src/server/store/store.ts";
import { setup } from "./_queue_harness.ts";

/** A collection that takes `ms` of the clock `performance.now()` reads. */
function busyFor(ms: number): () => void {
  return () => {
    const until = performance.now() + ms;
    while (performance.now() < until) { /* a collection's cost, as the clock sees it */ }
  };
}

describe("PacedCollection", () => {
  it("collects when called, then not again before costRatio times what the last one took", () => {
    let runs = 0;
    const collect = busyFor(5);
    const paced = new PacedCollection(10, () => {
      runs++;
      collect();
    });
    const first = performance.now();
    expect(paced.run(first)).toBe(true);
    const end = performance.now();
    expect(runs).toBe(1);
    // 5 ms or more taken: nothing for at least 50 ms after it ended.
    expect(paced.run(end + 49)).toBe(false);
    expect(runs).toBe(1);
    const took = end - first;
    expect(paced.run(end + took * 10 + 1)).toBe(true);
    expect(runs).toBe(2);
  });

  it("waits at least COLLECT_INTERVAL_MS after a collection that took no time", () => {
    let runs = 0;
    const paced = new PacedCollection(10, () => runs++);
    const now = performance.now();
    paced.run(now);
    expect(paced.run(performance.now() + COLLECT_INTERVAL_MS / 2)).toBe(false);
    expect(paced.run(performance.now() + COLLECT_INTERVAL_MS + 1)).toBe(true);
    expect(runs).toBe(2);
  });
});

describe("Pager", () => {
  it(`asks for a collection once per ${PAGED_PER_COLLECTION.toLocaleString("en")} paged sends, and not for sends kept in memory`, () => {
    const t = setup({ durability: "fsync", memoryBudgetBytes: 4096, maxItemsInQueue: Infinity });
    let collections = 0;
    let position = 0;
    const store = { positionOf: () => ++position } as unknown as PagingStore;
    const host: PagerHost = {
      log: null as never,
      queue: () => t.queue,
      admit: () => {},
      flush: () => {},
      shuttingDown: false,
      collect: () => collections++,
    };
    const pager = new Pager(store, host);
    let kept = 0;
    const body = new Uint8Array(100);
    for (let n = 0; n < 2 * PAGED_PER_COLLECTION + 10; n++) {
      const message = new Message(`m${n}`, t.queue.name, "a", body, 0, n);
      if (pager.page(t.queue, message)) continue;
      kept++;
      t.queue.publish(message);
    }
    const paged = 2 * PAGED_PER_COLLECTION + 10 - kept;
    expect(kept).toBeGreaterThan(0); // the budget held the first few
    expect(t.queue.backlog.count).toBe(paged);
    expect(collections).toBe(Math.floor(paged / PAGED_PER_COLLECTION));
  });
});
