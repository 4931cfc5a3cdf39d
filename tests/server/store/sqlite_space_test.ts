/**
 * SqliteStore's disk space (space.ts), on real files in temp folders: the pages of removed rows
 * go back to the file system in `reclaim()` steps, and the reserve kept for a full disk is
 * emptied by a commit that meets one and written again once there is room.
 */
import { Database } from "bun:sqlite";
import { expect, it } from "bun:test";
import { existsSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { memoryLogger } from "../../../src/server/log.ts";
import { STORE_FILE } from "../../../src/server/store/record.ts";
import { RESERVE_BYTES, RESERVE_FILE } from "../../../src/server/store/space.ts";
import { SqliteStore, WAL_SIZE_LIMIT } from "../../../src/server/store/sqlite_store.ts";
import type { StoredMessage } from "../../../src/server/store/store.ts";
import { waitFor } from "../../helpers/broker.ts";
import { sqliteStoreFixture, storeRejection } from "../../helpers/sqlite_store.ts";
import { storedMessage } from "./store_conformance.ts";

const { temps, withStore } = sqliteStoreFixture();

const sizeOf = (path: string) => (existsSync(path) ? statSync(path).size : 0);
const diskFull = () => Object.assign(new Error("database or disk is full"), { code: "SQLITE_FULL" });

/** Stores `count` messages of 1,000 bytes, 250 to a commit, as rows of the database; returns them in order. */
async function fillRows(store: SqliteStore, count: number): Promise<StoredMessage[]> {
  const body = new Uint8Array(1000).fill(7);
  const messages: StoredMessage[] = [];
  for (let first = 0; first < count; first += 250) {
    const appends = [];
    for (let n = first; n < Math.min(count, first + 250); n++) {
      const message = storedMessage(n, { body });
      messages.push(message);
      appends.push(store.append(message));
    }
    await Promise.all(appends);
  }
  store.readQueue("orders/v1", 0, 1); // a read settles the journal: every message is a row
  return messages;
}

it("SqliteStore.reclaim() hands the pages of removed rows back to the file system: the file shrinks, the rows kept stay", async () => {
  await withStore({ mode: "fsync" }, async (store, directory) => {
    const [db, wal] = [join(directory, STORE_FILE), join(directory, `${STORE_FILE}-wal`)];
    const messages = await fillRows(store, 5_000);
    const grown = sizeOf(db);
    expect(grown).toBeGreaterThan(4 * 1024 * 1024);
    // Ten rows spread over the whole file stay: the vacuum has to move them, not only cut the end.
    const kept = messages.filter((_, i) => i % 500 === 0);
    for (const message of messages) if (!kept.includes(message)) store.remove(message);
    await waitFor(() => store.pending === 0, 5000, "every delete committed");
    expect(sizeOf(db)).toBeGreaterThanOrEqual(grown); // deletes alone give nothing back

    // Fewer than 64 free pages are not worth a step: they may stay (with steps made small by a busy machine).
    const small = 128 * 1024 + 64 * 4096;
    for (let step = 0; step < 1000 && (sizeOf(db) > small || sizeOf(wal) > 0); step++) store.reclaim();
    expect(sizeOf(db)).toBeLessThan(small);
    expect(sizeOf(wal)).toBe(0); // the last step is a truncating checkpoint
    expect(store.stats.reclaimedPages).toBeGreaterThan(1000);
    expect(store.stats.reclaimSteps).toBeGreaterThan(1);
    expect(store.load().map((message) => message.id)).toEqual(kept.map((message) => message.id));

    // Nothing more to give back: a step costs nothing and writes nothing.
    const steps = store.stats.reclaimSteps;
    store.reclaim();
    expect(store.stats.reclaimSteps).toBe(steps);
    // And the store goes on: a removal of a kept row and a new append, read back after a reopen.
    store.remove(kept[0]!);
    await store.append(storedMessage(10_000));
    store.close();
    const reopened = new SqliteStore({ directory, logger: memoryLogger() });
    expect(reopened.load().map((message) => message.id)).toEqual([...kept.slice(1), storedMessage(10_000)].map((message) => message.id));
    reopened.close();
  });
});

/** One turn of the event loop: a step an idle store scheduled has run. */
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

it("SqliteStore.reclaim() on an idle store goes on with steps for idleStepsMs: one call gives a drained backlog back", async () => {
  for (const idleStepsMs of [0, 60_000]) {
    await withStore({ mode: "fsync", idleStepsMs }, async (store, directory) => {
      const db = join(directory, STORE_FILE);
      const messages = await fillRows(store, 5_000);
      for (const message of messages) store.remove(message);
      await waitFor(() => store.pending === 0, 5000, "every delete committed");
      const pages = sizeOf(db) / 4096;
      store.reclaim();
      expect(store.stats.reclaimSteps).toBe(1); // the others on later turns: a send may come between
      await nextTurn();
      if (idleStepsMs === 0) {
        // One step per call, as for a store with other work to do.
        expect(store.stats.reclaimSteps).toBe(1);
        expect(store.stats.reclaimedPages).toBeLessThan(pages / 2);
        return;
      }
      expect(store.stats.reclaimSteps).toBe(2);
      await waitFor(() => store.stats.reclaimedPages > pages * 0.75, 10_000, "the free pages given back");
      // Then a tick with nothing worth a step truncates the file.
      for (let tick = 0; tick < 100 && sizeOf(db) > 128 * 1024; tick++) {
        store.reclaim();
        await nextTurn();
      }
      expect(sizeOf(db)).toBeLessThan(128 * 1024);
    });
  }
});

it("SqliteStore.reclaim() on an idle store cuts what it gave back off the file every cutPages, as a step of its own", async () => {
  for (const cutPages of [64, 1_000_000]) {
    await withStore({ mode: "fsync", idleStepsMs: 60_000, cutPages }, async (store, directory) => {
      const db = join(directory, STORE_FILE);
      const messages = await fillRows(store, 5_000);
      for (const message of messages) store.remove(message);
      await waitFor(() => store.pending === 0, 5000, "every delete committed");
      const full = sizeOf(db);
      store.reclaim(); // a step of 256 pages: past 64, the next step is the cut
      await nextTurn();
      expect(store.stats.reclaimSteps).toBe(2);
      if (cutPages === 64) expect(sizeOf(db)).toBeLessThan(full);
      else expect(sizeOf(db)).toBe(full); // the file shrinks only at a checkpoint
    });
  }
});

it("SqliteStore closed while an idle store's next vacuum step waits for its turn: the step does not run", async () => {
  const logger = memoryLogger();
  await withStore({ mode: "fsync", idleStepsMs: 60_000, logger }, async (store) => {
    const messages = await fillRows(store, 5_000);
    for (const message of messages) store.remove(message);
    await waitFor(() => store.pending === 0, 5000, "every delete committed");
    store.reclaim();
    store.close(); // its statements are finalized: a step now would fail
    await nextTurn();
    expect(store.stats.reclaimSteps).toBe(1);
    expect(logger.lines.filter((line) => line.includes("space not given back"))).toEqual([]);
  });
});

it("SqliteStore.reclaim() takes one step per call while rows stream in and out, whatever idleStepsMs allows", async () => {
  await withStore({ mode: "fsync", idleStepsMs: 60_000 }, async (store) => {
    store.reclaim(); // nothing to give back yet; the rows written from here on count
    // More than BUSY_RECLAIM_MIN_PAGES (16 MiB) freed at once: worth a step even while busy.
    const messages = await fillRows(store, 20_000);
    for (const message of messages) store.remove(message);
    await waitFor(() => store.pending === 0, 10_000, "every delete committed");
    expect(store.stats.reclaimSteps).toBe(0);
    store.reclaim(); // 40,000 rows written since the last call, in a few seconds at most: busy
    await nextTurn();
    expect(store.stats.reclaimSteps).toBe(1);
  });
});

it("SqliteStore.reclaim() truncates a WAL that one large transaction grew past WAL_SIZE_LIMIT, when no commit cut it back", async () => {
  await withStore({ mode: "fsync", journal: false }, async (store, directory) => {
    const wal = join(directory, `${STORE_FILE}-wal`);
    const body = new Uint8Array(1000);
    await Promise.all(Array.from({ length: 4000 }, (_, n) => store.append(storedMessage(n, { body })))); // one commit
    expect(sizeOf(wal)).toBeGreaterThan(WAL_SIZE_LIMIT * 2);
    store.reclaim();
    expect(sizeOf(wal)).toBe(0);
    expect(store.load().length).toBe(4000);

    // While rows stream in (thousands a second) it waits: the commits' own checkpoints cut the
    // WAL back then. Once the store is quiet, a WAL still over its limit is truncated.
    let n = 4000;
    let largest = 0;
    let previous: StoredMessage[] = [];
    const steps = store.stats.reclaimSteps;
    for (const until = performance.now() + 2_500; performance.now() < until;) {
      // 200 rows of 1 KB in and the previous 200 out per 20 ms: 20,000 rows a second, the WAL
      // over its limit between checkpoints, a few free pages that the next rows reuse.
      const batch = Array.from({ length: 200 }, () => storedMessage(n++, { body }));
      await Promise.all(batch.map((message) => store.append(message)));
      for (const message of previous) store.remove(message);
      previous = batch;
      largest = Math.max(largest, sizeOf(wal));
      store.reclaim();
      expect(sizeOf(wal)).toBeGreaterThan(0);
      await Bun.sleep(20);
    }
    expect(largest).toBeGreaterThan(WAL_SIZE_LIMIT);
    expect(store.stats.reclaimSteps).toBe(steps); // no vacuum step, no truncating checkpoint
    await waitFor(() => {
      store.reclaim();
      return sizeOf(wal) <= WAL_SIZE_LIMIT;
    }, 5_000, "the WAL back within its limit once the store went quiet");
    expect(store.load().length).toBe(4000 + previous.length);
  });
});

it("SqliteStore creates its database in incremental vacuum mode", async () => {
  await withStore({}, async (store, directory) => {
    store.close();
    const db = new Database(join(directory, STORE_FILE), { readonly: true });
    expect(db.query("PRAGMA auto_vacuum").get()).toEqual({ auto_vacuum: 2 });
    db.close();
  });
});

for (const journal of [true, false]) it(`SqliteStore keeps a reserve file; a commit that meets a full disk empties it, and a send writes it again once the disk has room (journal: ${journal})`, async () => {
  let failing = false;
  const logger = memoryLogger();
  const beforeCommit = () => {
    if (failing) throw diskFull();
  };
  await withStore({ beforeCommit, logger, retryIntervalMs: 5, journal }, async (store, directory) => {
    const reserve = join(directory, RESERVE_FILE);
    expect(sizeOf(reserve)).toBe(RESERVE_BYTES);
    const stored = storedMessage(1);
    await store.append(stored);
    failing = true;
    expect((await storeRejection(store.append(storedMessage(2)))).code).toBe("STORE_UNAVAILABLE");
    expect(sizeOf(reserve)).toBe(0);
    expect(existsSync(reserve)).toBe(true); // empty, not gone: a restart knows the reserve is in use
    expect(logger.lines.filter((line) => line.includes(`disk full: reserve of ${RESERVE_BYTES} bytes released`)).length).toBe(1);
    store.remove(stored);
    // Removes are still retried while it is in use (they free space); a journaled message's
    // needs no database write (the journal's files are emptied: nothing live is left in them).
    if (journal) await waitFor(() => store.pending === 0, 2000, "the journaled message's remove done");
    else await waitFor(() => store.stats.failedCommits >= 2, 2000, "the remove retried");
    failing = false;
    // This disk has room: the next send finds it, writes the reserve again and is stored.
    await store.append(storedMessage(3));
    expect(sizeOf(reserve)).toBe(RESERVE_BYTES);
    expect(logger.lines.some((line) => line.includes("disk has room again: reserve restored, sends accepted"))).toBe(true);
    await waitFor(() => store.pending === 0, 2000, "the remove committed");
    expect(store.load().map((message) => message.id)).toEqual([storedMessage(3).id]);
  });
});

it("SqliteStore opened with its reserve in use (an empty file) writes it again when the disk has room", () => {
  const directory = temps.make();
  writeFileSync(join(directory, RESERVE_FILE), new Uint8Array(0));
  const store = new SqliteStore({ directory, logger: memoryLogger() });
  expect(sizeOf(join(directory, RESERVE_FILE))).toBe(RESERVE_BYTES);
  store.close();
});

it("SqliteStore refuses new messages while its reserve is in use and the disk has no room, before anything is committed, and takes them once it has", async () => {
  let failing = false;
  let free = 1 << 30;
  const beforeCommit = () => {
    if (failing) throw diskFull();
  };
  await withStore({ beforeCommit, readFree: () => free, retryIntervalMs: 5 }, async (store, directory) => {
    failing = true;
    expect((await storeRejection(store.append(storedMessage(1)))).code).toBe("STORE_UNAVAILABLE"); // empties the reserve
    failing = false;
    free = 0; // the disk is still full
    const failed = store.stats.failedCommits;
    const refusal = store.refusal("orders/v1/x");
    expect(refusal?.code).toBe("STORE_UNAVAILABLE");
    expect(refusal?.message).toContain('Cannot send to "orders/v1/x"');
    expect(refusal?.message).toContain(RESERVE_FILE);
    const refused = await storeRejection(store.append(storedMessage(2)));
    expect(refused.message).toContain(RESERVE_FILE);
    expect(store.stats.failedCommits).toBe(failed); // refused, not tried
    expect(sizeOf(join(directory, RESERVE_FILE))).toBe(0);

    free = 1 << 30; // room again: within RESERVE_CHECK_MS the reserve is written and sends are taken
    await waitFor(() => store.refusal("orders/v1/x") === null, 2_000, "the reserve written again");
    expect(sizeOf(join(directory, RESERVE_FILE))).toBe(RESERVE_BYTES);
    await store.append(storedMessage(3));
    expect(store.load().map((message) => message.id)).toEqual([storedMessage(3).id]);
  });
});

it("SqliteStore whose disk had no room for the reserve at open writes it from reclaim() once the disk has room", async () => {
  let free = 0;
  await withStore({ readFree: () => free }, async (store, directory) => {
    const reserve = join(directory, RESERVE_FILE);
    expect(existsSync(reserve)).toBe(false);
    store.reclaim();
    expect(existsSync(reserve)).toBe(false);
    free = 1 << 30;
    await waitFor(() => {
      store.reclaim();
      return sizeOf(reserve) === RESERVE_BYTES;
    }, 3_000, "the reserve written");
    expect(store.refusal("orders/v1/x")).toBeNull();
  });
});
