/**
 * A meta value written with the next commit rides that commit (no transaction of its own), is
 * not in the table before it, survives a failed commit until the retry succeeds, and never
 * overwrites a value written at once after it.
 */
import { expect, it } from "bun:test";
import { memoryLogger } from "../../../src/server/log.ts";
import { SqliteStore } from "../../../src/server/store/sqlite_store.ts";
import { sqliteStoreFixture } from "../../helpers/sqlite_store.ts";
import { waitFor } from "../../helpers/broker.ts";
import { storedMessage } from "./store_conformance.ts";

const { temps, withStore } = sqliteStoreFixture();

it("setMetaWithNextCommit() writes with the commit of the appends, not in a transaction of its own", async () => {
  await withStore({ commitIntervalMs: 60_000 }, async (store) => {
    store.setMetaWithNextCommit("logIndex", 41);
    expect(store.meta("logIndex")).toBeNull(); // not in the table yet
    expect(store.pending).toBe(1);
    const commitsBefore = store.stats.commits;
    await store.append(storedMessage(1)); // the next commit, on the next turn
    expect(store.meta("logIndex")).toBe(41);
    expect(store.stats.commits).toBe(commitsBefore + 1);
    expect(store.pending).toBe(0);
  });
});

it("setMetaWithNextCommit() alone asks for a commit within commitIntervalMs; the latest value per key wins", async () => {
  await withStore({ commitIntervalMs: 5 }, async (store) => {
    store.setMetaWithNextCommit("logIndex", 7);
    store.setMetaWithNextCommit("logIndex", 9);
    await waitFor(() => store.meta("logIndex") === 9);
    expect(store.pending).toBe(0);
  });
});

it("setMeta() wins over a value still waiting for the next commit under the same key", async () => {
  await withStore({ commitIntervalMs: 60_000 }, async (store) => {
    store.setMetaWithNextCommit("logIndex", 100);
    store.setMeta("logIndex", 50); // e.g. a resume from an older index, written at once
    await store.append(storedMessage(1));
    expect(store.meta("logIndex")).toBe(50);
  });
});

it("a value waiting for the next commit survives a failed commit and is written by the retry", async () => {
  let failures = 1;
  const beforeCommit = () => {
    if (failures-- > 0) throw new Error("disk I/O error (test)");
  };
  await withStore({ commitIntervalMs: 2, retryIntervalMs: 5, beforeCommit }, async (store) => {
    store.setMetaWithNextCommit("logIndex", 12);
    await waitFor(() => store.stats.failedCommits === 1);
    expect(store.meta("logIndex")).toBeNull();
    await waitFor(() => store.meta("logIndex") === 12);
    expect(store.healthy).toBe(true);
  });
});

it("close() writes a value still waiting for the next commit", () => {
  const directory = temps.make();
  const store = new SqliteStore({ directory, commitIntervalMs: 60_000, logger: memoryLogger() });
  store.setMetaWithNextCommit("logIndex", 77);
  store.close();
  const reopened = new SqliteStore({ directory, logger: memoryLogger() });
  expect(reopened.meta("logIndex")).toBe(77);
  reopened.close();
});
