/**
 * HeldIds (store/held_ids.ts): a store opened without the index by id builds it when first asked;
 * a build that fails (the database busy, a full disk) answers "not held", says why, and is tried
 * again only RETRY_BUILD_MS later, not on every lookup.
 */
import { Database } from "bun:sqlite";
import { afterAll, expect, it } from "bun:test";
import { join } from "node:path";
import { memoryLogger } from "../../../src/server/log.ts";
import { HeldIds, RETRY_BUILD_MS } from "../../../src/server/store/held_ids.ts";
import { TempDirs } from "../../helpers/temp_dir.ts";

const temps = new TempDirs();
afterAll(() => temps.removeAll());

it("a failed build of the index answers not held, is logged, and is tried again only after RETRY_BUILD_MS", () => {
  const path = join(temps.make(), "store.sqlite");
  const other = new Database(path);
  other.run("CREATE TABLE messages (seq INTEGER PRIMARY KEY, id TEXT NOT NULL)");
  other.run("INSERT INTO messages (seq, id) VALUES (1, 'kept')");
  const db = new Database(path);
  const logger = memoryLogger();
  let now = 0;
  const ids = new HeldIds(db, false, logger, "data", () => now);
  const failures = () => logger.lines.filter((line) => line.includes("cannot build the index of messages by id")).length;
  const builds = () => logger.lines.filter((line) => line.includes("built the index of messages by id")).length;
  try {
    other.run("BEGIN EXCLUSIVE"); // another connection holds the database: CREATE INDEX fails (busy)
    expect(ids.holds("kept", [])).toBe(false);
    expect(failures()).toBe(1);
    other.run("COMMIT");
    now = RETRY_BUILD_MS - 1;
    expect(ids.holds("kept", [])).toBe(false); // not tried again yet
    expect(failures()).toBe(1);
    expect(builds()).toBe(0);
    now = RETRY_BUILD_MS;
    expect(ids.holds("kept", [])).toBe(true);
    expect(ids.holds("never-stored", [])).toBe(false);
    expect(builds()).toBe(1);
    expect(other.query("SELECT name FROM sqlite_master WHERE type = 'index'").all()).toEqual([{ name: "messages_by_id" }]);
  } finally {
    ids.finalize();
    db.close();
    other.close();
  }
});

it("a row whose delete is pending counts as gone, until the delete is committed or dropped", () => {
  const db = new Database(":memory:");
  db.run("CREATE TABLE messages (seq INTEGER PRIMARY KEY, id TEXT NOT NULL)");
  db.run("INSERT INTO messages (seq, id) VALUES (1, 'a'), (2, 'b')");
  const ids = new HeldIds(db, false, memoryLogger(), "data");
  const b = { id: "b" } as never;
  try {
    // The first ask counts the removes already pending.
    expect(ids.holds("b", [b])).toBe(false);
    expect(ids.holds("a", [b])).toBe(true);
    ids.removing("a");
    expect(ids.holds("a", [])).toBe(false);
    db.run("DELETE FROM messages WHERE id IN ('a', 'b')");
    ids.deleted([{ id: "a" } as never, b], 2);
    expect(ids.holds("a", [])).toBe(false);
    db.run("INSERT INTO messages (seq, id) VALUES (3, 'a')"); // stored again: held again
    expect(ids.holds("a", [])).toBe(true);
  } finally {
    ids.finalize();
    db.close();
  }
});
