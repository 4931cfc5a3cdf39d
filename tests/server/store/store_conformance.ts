/**
 * One test suite for every `Store` (hono's `runTest({ newRouter })`): memory_store_test.ts and
 * sqlite_store_test.ts call `runStoreConformance` with a factory, so both stores keep the same
 * contract. `await store.append(m)` covers both answers (nothing, or a promise).
 */
import { expect, it } from "bun:test";
import type { Store, StoredDeadLetter, StoredMessage } from "../../../src/server/store/store.ts";

export interface StoreUnderTest {
  store: Store;
  /** Durable stores: closes the store and opens the same place again. */
  reopen?: () => Promise<Store>;
  /** Closes whatever is still open and deletes temp files. */
  cleanup: () => Promise<void> | void;
  /** Durable stores: delivery-count UPDATEs written so far by the store under test (its stats). */
  updates?: () => number;
  /** Durable stores: resolves once the open store has nothing waiting for a commit. */
  committed?: () => Promise<void>;
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

/** The v2 fields a loaded message carries: its delivery count and dead-letter info (defaults applied). */
export function delivery(message: StoredMessage): { id: string; deliveries: number; deadLetter: StoredDeadLetter | null } {
  return { id: message.id, deliveries: message.deliveries ?? 0, deadLetter: message.deadLetter ?? null };
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

  /** What a restart would load: the same store for memory, a reopened one for a durable store. */
  async function recovered(subject: StoreUnderTest): Promise<{ store: Store; loaded: StoredMessage[] }> {
    const store = durable ? await subject.reopen!() : subject.store;
    return { store, loaded: store.load() };
  }

  it(`${name}: noteDelivery() keeps the highest count per message, and load() returns it (durable: after reopen)`, async () => {
    await withStore(async (subject) => {
      const { store } = subject;
      const [a, b, c] = [1, 2, 3].map((n) => storedMessage(n));
      for (const message of [a!, b!, c!]) await store.append(message);
      store.noteDelivery(a!, 1);
      store.noteDelivery(c!, 2);
      store.noteDelivery(c!, 5); // Copies of a message report their own counts, in any order.
      store.noteDelivery(c!, 3);
      const first = await recovered(subject);
      expect(first.loaded.map(delivery)).toEqual([
        { id: a!.id, deliveries: 1, deadLetter: null },
        { id: b!.id, deliveries: 0, deadLetter: null },
        { id: c!.id, deliveries: 5, deadLetter: null },
      ]);
      // Counts continue on the loaded objects (recovered messages redelivered); they never go down.
      first.store.noteDelivery(first.loaded[0]!, 4);
      first.store.noteDelivery(first.loaded[2]!, 2);
      await subject.committed?.(); // Durable stores: an earlier commit wrote 5; this one writes nothing lower.
      first.store.noteDelivery(first.loaded[2]!, 1);
      const second = await recovered(subject);
      expect(second.loaded.map(delivery).map((m) => m.deliveries)).toEqual([4, 0, 5]);
      expect(second.loaded.map(fields)).toEqual([a!, b!, c!].map(fields));
    });
  });

  it(`${name}: noteDelivery() never writes to the message object it is given`, async () => {
    await withStore(async ({ store }) => {
      const message = storedMessage(1);
      await store.append(message);
      store.noteDelivery(message, 3);
      expect(message.deliveries).toBeUndefined();
      expect(store.load().map(delivery)).toEqual([{ id: message.id, deliveries: 3, deadLetter: null }]);
      expect(message.deliveries).toBeUndefined();
    });
  });

  it(`${name}: noteDelivery() of a removed, unknown or cancelled message is harmless`, async () => {
    await withStore(async (subject) => {
      const { store } = subject;
      const [kept, acked, cancelled, unknown] = [1, 2, 3, 4].map((n) => storedMessage(n));
      await store.append(kept!);
      await store.append(acked!);
      store.load(); // Both committed (batch mode too): their counts would take an UPDATE.
      store.noteDelivery(acked!, 1);
      store.remove(acked!); // Acked before the count was written.
      store.noteDelivery(acked!, 2); // Noted after the ack (a late copy).
      const pending = store.append(cancelled!);
      store.noteDelivery(cancelled!, 1);
      store.remove(cancelled!);
      await pending;
      store.noteDelivery(unknown!, 7); // Never appended (a memory-mode channel).
      store.noteDelivery(kept!, 1);
      expect(store.load().map(delivery)).toEqual([{ id: kept!.id, deliveries: 1, deadLetter: null }]);
      await subject.committed?.(); // Durable stores: the counts of gone messages were dropped by a commit.
      expect((await recovered(subject)).loaded.map(delivery)).toEqual([{ id: kept!.id, deliveries: 1, deadLetter: null }]);
      if (subject.updates) expect(subject.updates()).toBe(1);
    });
  });

  it(`${name}: a count noted while the append is pending is stored with it (in the INSERT, no UPDATE)`, async () => {
    await withStore(async (subject) => {
      const { store } = subject;
      const message = storedMessage(1);
      const gone = storedMessage(2);
      const stored = [store.append(message), store.append(gone)];
      store.noteDelivery(message, 1); // Delivered before its commit (batch mode confirms at once).
      store.noteDelivery(message, 2);
      store.noteDelivery(gone, 1);
      store.remove(gone); // Delivered and acked in the same batch: neither row nor count is written.
      await Promise.all(stored);
      expect(store.load().map(delivery)).toEqual([{ id: message.id, deliveries: 2, deadLetter: null }]);
      if (subject.updates) expect(subject.updates()).toBe(0);
      expect((await recovered(subject)).loaded.map(delivery)).toEqual([{ id: message.id, deliveries: 2, deadLetter: null }]);
    });
  });

  it(`${name}: noteDelay() keeps the latest delay per message and the highest count, and load() returns them (durable: after reopen)`, async () => {
    await withStore(async (subject) => {
      const { store } = subject;
      const [a, b, c] = [1, 2, 3].map((n) => storedMessage(n));
      const moved = storedMessage(4, { notBefore: 1_800_000_000_400 }); // came delayed with a queue move
      for (const message of [a!, b!, c!, moved]) await store.append(message);
      store.noteDelay(a!, 1_800_000_000_100);
      store.noteDelay(c!, 1_800_000_009_000, 2);
      store.noteDelay(c!, 1_800_000_000_300, 1); // nacked again, with a shorter delay: the latest wins
      const first = await recovered(subject);
      expect(first.loaded.map((message) => [message.id, message.notBefore ?? 0, message.deliveries ?? 0])).toEqual([
        [a!.id, 1_800_000_000_100, 0],
        [b!.id, 0, 0],
        [c!.id, 1_800_000_000_300, 2],
        [moved.id, 1_800_000_000_400, 0],
      ]);
      // Delays go on on the loaded objects (recovered messages nacked again).
      first.store.noteDelay(first.loaded[1]!, 1_800_000_000_200);
      const second = await recovered(subject);
      expect(second.loaded.map((message) => message.notBefore ?? 0)).toEqual([1_800_000_000_100, 1_800_000_000_200, 1_800_000_000_300, 1_800_000_000_400]);
      expect(second.loaded.map(fields)).toEqual([a!, b!, c!, moved].map(fields));
    });
  });

  it(`${name}: noteDelay() of a removed, unknown or cancelled message is harmless; one noted while the append is pending goes with it`, async () => {
    await withStore(async (subject) => {
      const { store } = subject;
      const [kept, acked, cancelled, unknown, pendingDelay] = [1, 2, 3, 4, 5].map((n) => storedMessage(n));
      await store.append(kept!);
      await store.append(acked!);
      store.load(); // Both committed (batch mode too): their delays would take an UPDATE.
      store.noteDelay(acked!, 1_800_000_000_000);
      store.remove(acked!); // Acked before the delay was written.
      store.noteDelay(acked!, 1_800_000_000_001); // Noted after the ack (a late copy).
      const cancelling = store.append(cancelled!);
      store.noteDelay(cancelled!, 1_800_000_000_002);
      store.remove(cancelled!);
      await cancelling;
      store.noteDelay(unknown!, 1_800_000_000_003); // Never appended (a memory-mode channel).
      const appending = store.append(pendingDelay!);
      store.noteDelay(pendingDelay!, 1_800_000_000_005); // Nacked before its commit (batch mode confirms at once).
      await appending;
      expect(pendingDelay!.notBefore).toBeUndefined(); // the given object is not written to
      const expected = [
        [kept!.id, 0],
        [pendingDelay!.id, 1_800_000_000_005],
      ];
      expect(store.load().map((message) => [message.id, message.notBefore ?? 0])).toEqual(expected);
      await subject.committed?.();
      if (subject.updates) expect(subject.updates()).toBe(0); // the INSERT wrote the pending one's delay
      expect((await recovered(subject)).loaded.map((message) => [message.id, message.notBefore ?? 0])).toEqual(expected);
    });
  });

  it(`${name}: deadLetter and a given deliveries count round-trip through append() and load()`, async () => {
    await withStore(async (subject) => {
      const { store } = subject;
      const reasons = ["requeueLimit", "overflow", "ttl"] as const;
      const dead = reasons.map((reason, n) =>
        storedMessage(10 + n, {
          id: `sender.${n}~${40 + n}`,
          queue: "dead/v1",
          deadLetter: { reason, channel: `orders/v1/shop-${n}`, messageId: `sender.${n}`, deliveries: n * 3 },
        }),
      );
      const plain = storedMessage(1, { deadLetter: null });
      const carried = storedMessage(2, { deliveries: 4 }); // Appended with a count (kept from before).
      for (const message of [...dead, plain, carried]) await store.append(message);
      store.noteDelivery(dead[1]!, 1);
      const expected = [
        ...dead.map((message, n) => ({ id: message.id, deliveries: n === 1 ? 1 : 0, deadLetter: message.deadLetter! })),
        { id: plain.id, deliveries: 0, deadLetter: null },
        { id: carried.id, deliveries: 4, deadLetter: null },
      ];
      expect(store.load().map(delivery)).toEqual(expected);
      const { loaded } = await recovered(subject);
      expect(loaded.map(delivery)).toEqual(expected);
      expect(loaded.map(fields)).toEqual([...dead, plain, carried].map(fields));
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
