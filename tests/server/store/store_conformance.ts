/**
 * One test suite for every `Store` (hono's `runTest({ newRouter })`): memory_store_test.ts and
 * sqlite_store_test.ts call `runStoreConformance` with a factory, so both stores keep the same
 * contract. `await store.append(m)` covers both answers (nothing, or a promise).
 */
import { expect, it } from "bun:test";
import type { Store, StoredMessage } from "../../../src/server/store/store.ts";

export interface StoreUnderTest {
  store: Store;
  /** Durable stores: closes the store and opens the same place again. */
  reopen?: () => Promise<Store>;
  /** Closes whatever is still open and deletes temp files. */
  cleanup: () => Promise<void> | void;
}

const encoder = new TextEncoder();

export function storedMessage(n: number, overrides: Partial<StoredMessage> = {}): StoredMessage {
  return {
    id: `sender.${n.toString(36)}`,
    queue: "orders/v1",
    destination: n % 3 === 0 ? "*" : `shop-${n % 5}`,
    body: encoder.encode(`body of message ${n}`),
    created: 1_700_000_000_000 + n,
    ...overrides,
  };
}

/** The fields a store keeps, as plain data (a loaded message may be a new object). */
export function fields(message: StoredMessage): StoredMessage {
  const { id, queue, destination, body, created } = message;
  return { id, queue, destination, body: new Uint8Array(body), created };
}

export interface ConformanceOptions {
  /** The store keeps messages across close and open: `reopen` is given and the durable tests run. */
  durable?: boolean;
}

export function runStoreConformance(
  name: string,
  makeStore: () => Promise<StoreUnderTest>,
  { durable = false }: ConformanceOptions = {},
): void {
  async function withStore(body: (subject: StoreUnderTest) => Promise<void>): Promise<void> {
    const subject = await makeStore();
    try {
      await body(subject);
    } finally {
      await subject.cleanup();
    }
  }

  it(`${name}: load() returns appended messages in arrival order with every field`, async () => {
    await withStore(async ({ store }) => {
      const messages = [5, 1, 4, 2, 3].map((n) => storedMessage(n));
      for (const message of messages) await store.append(message);
      expect(store.load().map(fields)).toEqual(messages.map(fields));
    });
  });

  it(`${name}: load() of a new store is empty`, async () => {
    await withStore(async ({ store }) => {
      expect(store.load()).toEqual([]);
    });
  });

  it(`${name}: remove() forgets a message and keeps the others in order`, async () => {
    await withStore(async ({ store }) => {
      const messages = [0, 1, 2, 3].map((n) => storedMessage(n));
      await Promise.all(messages.map((message) => store.append(message)));
      store.remove(messages[1]!);
      store.remove(messages[3]!);
      expect(store.load().map((message) => message.id)).toEqual([messages[0]!.id, messages[2]!.id]);
    });
  });

  it(`${name}: remove() right after append(), before any commit, forgets the message`, async () => {
    await withStore(async ({ store }) => {
      const kept = storedMessage(1);
      const gone = storedMessage(2);
      const results = [store.append(kept), store.append(gone)];
      store.remove(gone);
      await Promise.all(results);
      expect(store.load().map(fields)).toEqual([fields(kept)]);
    });
  });

  it(`${name}: remove() of an unknown or already removed message changes nothing`, async () => {
    await withStore(async ({ store }) => {
      const message = storedMessage(1);
      await store.append(message);
      store.remove(storedMessage(2));
      store.remove(storedMessage(1)); // Same fields, another object: not the appended one.
      expect(store.load().map(fields)).toEqual([fields(message)]);
      store.remove(message);
      store.remove(message);
      expect(store.load()).toEqual([]);
    });
  });

  it(`${name}: messages with the same id are kept apart`, async () => {
    await withStore(async ({ store }) => {
      const first = storedMessage(1, { body: new Uint8Array([1]) });
      const again = storedMessage(1, { body: new Uint8Array([2]) });
      await store.append(first);
      await store.append(again);
      store.remove(first);
      expect(store.load().map(fields)).toEqual([fields(again)]);
    });
  });

  it(`${name}: body bytes are preserved exactly`, async () => {
    await withStore(async ({ store }) => {
      const every = Uint8Array.from({ length: 256 }, (_, i) => i);
      const backing = Uint8Array.from({ length: 64 }, (_, i) => 255 - i);
      const large = crypto.getRandomValues(new Uint8Array(1 << 20).subarray(0, 65_536));
      const huge = new Uint8Array(1 << 20);
      for (let i = 0; i < huge.length; i += 65_536) huge.set(large, i);
      const bodies = [new Uint8Array(0), every, backing.subarray(10, 20), large, huge, new Uint8Array([0, 0, 0])];
      const messages = bodies.map((body, n) => storedMessage(n, { body }));
      for (const message of messages) await store.append(message);
      const loaded = store.load();
      expect(loaded.length).toBe(bodies.length);
      loaded.forEach((message, n) => {
        expect(message.body).toBeInstanceOf(Uint8Array);
        expect(message.body.byteLength).toBe(bodies[n]!.byteLength);
        expect(Buffer.compare(message.body, bodies[n]!)).toBe(0);
      });
    });
  });

  it(`${name}: keeps 10,000 messages in order and removes half of them`, async () => {
    await withStore(async ({ store }) => {
      const messages = Array.from({ length: 10_000 }, (_, n) => storedMessage(n));
      await Promise.all(messages.map((message) => store.append(message)));
      let loaded = store.load();
      expect(loaded.length).toBe(10_000);
      expect(loaded.every((message, n) => message.id === messages[n]!.id)).toBe(true);
      for (let n = 0; n < messages.length; n += 2) store.remove(messages[n]!);
      loaded = store.load();
      expect(loaded.map((message) => message.id)).toEqual(messages.filter((_, n) => n % 2 === 1).map((message) => message.id));
    });
  });

  it(`${name}: close() can be called twice`, async () => {
    await withStore(async ({ store }) => {
      await store.append(storedMessage(1));
      await store.close();
      await store.close();
    });
  });

  if (!durable) return;

  it(`${name}: load() after reopen returns the same messages, and removes of loaded ones last`, async () => {
    await withStore(async ({ store, reopen: maybeReopen }) => {
      const reopen = maybeReopen!;
      const messages = Array.from({ length: 6 }, (_, n) => storedMessage(n, { body: Uint8Array.of(n, 255, 0) }));
      for (const message of messages) await store.append(message);
      store.remove(messages[0]!);
      store.remove(messages[4]!);
      let reopened = await reopen();
      const loaded = reopened.load();
      expect(loaded.map(fields)).toEqual([1, 2, 3, 5].map((n) => fields(messages[n]!)));
      // Recovery: the broker removes loaded messages when they are acked, and appends new ones after them.
      reopened.remove(loaded[0]!);
      const later = storedMessage(100);
      await reopened.append(later);
      reopened = await reopen();
      expect(reopened.load().map(fields)).toEqual([...[2, 3, 5].map((n) => fields(messages[n]!)), fields(later)]);
    });
  });

  it(`${name}: close() commits what is pending`, async () => {
    await withStore(async ({ store, reopen: maybeReopen }) => {
      const reopen = maybeReopen!;
      const kept = storedMessage(1);
      const removed = storedMessage(2);
      await store.append(removed);
      const stored = store.append(kept); // Not awaited: still pending when close() runs.
      store.remove(removed);
      await store.close();
      await stored;
      expect((await reopen()).load().map(fields)).toEqual([fields(kept)]);
    });
  });
}
