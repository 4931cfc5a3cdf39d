/**
 * SqliteStore.newestIds(): the ids a broker remembers as seen at start, so that the resends a
 * crash causes are not stored twice (intake.ts, dedup.ts). The newest messages, journaled or in
 * the database, oldest first, up to the limit.
 */
import { expect, it } from "bun:test";
import { waitFor } from "../../helpers/broker.ts";
import { sqliteStoreFixture } from "../../helpers/sqlite_store.ts";
import { storedMessage } from "./store_conformance.ts";

const { withStore, openCrashCopy } = sqliteStoreFixture();

it("SqliteStore.newestIds() gives the newest ids, journaled then in the database, oldest first, up to the limit", async () => {
  await withStore({ mode: "fsync" }, async (store) => {
    const older = [0, 1, 2, 3].map((n) => storedMessage(n));
    await Promise.all(older.map((message) => store.append(message)));
    store.readQueue("q/v1", 0, 1); // a read settles the journal: these four are rows now
    expect(store.stats.settles).toBe(1);
    const newer = [4, 5, 6].map((n) => storedMessage(n));
    await Promise.all(newer.map((message) => store.append(message)));
    store.remove(older[3]!); // acked: once its delete is committed, not remembered
    await waitFor(() => store.pending === 0, 2000, "the delete is committed");
    const ids = (ns: number[]) => ns.map((n) => storedMessage(n).id);
    expect(store.newestIds(100)).toEqual(ids([0, 1, 2, 4, 5, 6]));
    expect(store.newestIds(4)).toEqual(ids([1, 2, 4, 5, 6]).slice(-4));
    expect(store.newestIds(2)).toEqual(ids([5, 6]));
    expect(store.newestIds(0)).toEqual([]);
  });
});

it("SqliteStore.newestIds() after a crash gives the messages its journal kept", async () => {
  await withStore({ mode: "fsync" }, async (store, directory) => {
    const messages = Array.from({ length: 50 }, (_, n) => storedMessage(n));
    await Promise.all(messages.map((message) => store.append(message)));
    const crashed = openCrashCopy(directory);
    try {
      expect(crashed.newestIds(1000)).toEqual(messages.map((message) => message.id));
    } finally {
      crashed.close();
    }
  });
});
