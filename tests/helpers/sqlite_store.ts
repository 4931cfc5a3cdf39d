/**
 * Shared setup of the SqliteStore tests (tests/server/store/sqlite_store*_test.ts): temp folders
 * removed after the file, a store in one, and what a crash would leave on disk.
 */
import { Database } from "bun:sqlite";
import { afterAll, expect } from "bun:test";
import { copyFileSync, existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { KittenError } from "../../src/protocol/errors.ts";
import { memoryLogger } from "../../src/server/log.ts";
import { JOURNAL_FILES } from "../../src/server/store/journal.ts";
import { STORE_FILE } from "../../src/server/store/record.ts";
import { SqliteStore, type SqliteStoreOptions } from "../../src/server/store/sqlite_store.ts";
import type { StoredMessage } from "../../src/server/store/store.ts";
import { TempDirs } from "./temp_dir.ts";

/**
 * The fixture of one test file: its folders are removed after it (`afterAll`), even after a
 * failure. `defaults` are options of every store it opens (a test's own override them).
 */
export function sqliteStoreFixture(defaults: Partial<SqliteStoreOptions> = {}) {
  const temps = new TempDirs("kitten-store-");
  afterAll(temps.removeAll);

  /** Runs `body` with a store in a temp directory, then closes it and deletes the directory. */
  async function withStore(
    options: Partial<SqliteStoreOptions>,
    body: (store: SqliteStore, directory: string) => Promise<void>,
  ): Promise<void> {
    const directory = temps.make();
    const store = new SqliteStore({ directory, logger: memoryLogger(), ...defaults, ...options });
    try {
      await body(store, directory);
    } finally {
      store.close();
      rmSync(directory, { recursive: true, force: true });
    }
  }

  /** Opens a copy of the store's files (database and journal): what a crash at this instant would leave on disk (ids). */
  function snapshot(directory: string): string[] {
    return snapshotMessages(directory).map((message) => message.id);
  }

  /** Like `snapshot`, the loaded messages. */
  function snapshotMessages(directory: string): StoredMessage[] {
    const store = openCrashCopy(directory);
    try {
      return store.load();
    } finally {
      store.close();
      rmSync(store.directory, { recursive: true, force: true });
    }
  }

  /**
   * A store opened on a copy of the files of the store in `directory` (database and journal):
   * what a start after a crash at this instant finds. The caller closes it.
   */
  function openCrashCopy(directory: string): SqliteStore {
    const copy = temps.make();
    for (const name of [STORE_FILE, `${STORE_FILE}-wal`, ...JOURNAL_FILES]) {
      const file = join(directory, name);
      if (existsSync(file)) copyFileSync(file, join(copy, name));
    }
    return new SqliteStore({ directory: copy, logger: memoryLogger() });
  }

  return { temps, withStore, snapshot, snapshotMessages, openCrashCopy };
}

/**
 * The error `promise` rejects with, asserted to be a KittenError. Accepts append()'s
 * `void | Promise` result (tests/helpers/broker.ts's `rejection` takes a promise only).
 */
export async function storeRejection(promise: unknown): Promise<KittenError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(KittenError);
    return error as KittenError;
  }
  throw new Error("expected a rejection");
}

/** The indexes of the messages table in the store of `directory` (read-only, by name). */
export function messageIndexes(directory: string): string[] {
  const db = new Database(join(directory, STORE_FILE), { readonly: true });
  try {
    return db.query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages' ORDER BY name").all().map((row) => row.name);
  } finally {
    db.close();
  }
}
