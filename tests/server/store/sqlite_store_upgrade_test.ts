/**
 * SqliteStore across versions: the checked-in store fixtures read back, upgrades that match the
 * schema of a fresh store, migrate(), metadata, and opening a missing directory.
 */
import { Database } from "bun:sqlite";
import { expect, it } from "bun:test";
import { existsSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { memoryLogger } from "../../../src/server/log.ts";
import { META, migrate, SCHEMA, STORE_FILE } from "../../../src/server/store/record.ts";
import { SqliteStore } from "../../../src/server/store/sqlite_store.ts";
import { STORE_VERSION } from "../../../src/version.ts";
import { delivery, fields, storedMessage } from "./store_conformance.ts";
import { sqliteStoreFixture } from "../../helpers/sqlite_store.ts";

const { temps, snapshotMessages } = sqliteStoreFixture();

const fixtureV1 = readFileSync(join(import.meta.dir, "fixtures/store_v1.sql"), "utf8");

it("SqliteStore reads the checked-in store v1 fixture (upgrade/readback)", async () => {
  const directory = temps.make();
  try {
    const db = new Database(join(directory, STORE_FILE));
    db.run(fixtureV1);
    db.close();
    const logger = memoryLogger();
    const store = new SqliteStore({ directory, logger });
    expect(logger.lines).toContain(`[info ] [store    ] directory=${directory};from=1;to=${STORE_VERSION};store upgraded`);
    const loaded = store.load();
    // Upgraded in place: v1 kept no delivery counts nor dead letters.
    expect(loaded.map(delivery)).toEqual(["k1a2.0", "k1a2.1", "k1a2.4", "k1a2.4~9"].map((id) => ({ id, deliveries: 0, deadLetter: null })));
    expect(loaded.map(fields)).toEqual([
      { id: "k1a2.0", queue: "orders/v1", destination: "shop-1", created: 1767225601000, body: Uint8Array.from(Buffer.from("a2626964016474657874657061706572", "hex")) },
      { id: "k1a2.1", queue: "orders/v1", destination: "*", created: 1767225602000, body: new TextEncoder().encode('{"id":2}') },
      { id: "k1a2.4", queue: "mails/v2", destination: "ops", created: 1767225605000, body: new Uint8Array(0) },
      { id: "k1a2.4~9", queue: "dead/v1", destination: "shop-1", created: 1767225606000, body: Uint8Array.from({ length: 16 }, (_, i) => i) },
    ]);
    expect(store.meta(META.STORE_VERSION)).toBe(STORE_VERSION);
    expect(store.meta(META.EPOCH)).toBe(7);
    // New messages go after the old ones; loaded ones can be removed and counted.
    store.remove(loaded[1]!);
    store.noteDelivery(loaded[2]!, 2);
    await store.append(storedMessage(1));
    store.close();
    const reopened = new SqliteStore({ directory, logger: memoryLogger() });
    expect(reopened.load().map(delivery)).toEqual([
      { id: "k1a2.0", deliveries: 0, deadLetter: null },
      { id: "k1a2.4", deliveries: 2, deadLetter: null },
      { id: "k1a2.4~9", deliveries: 0, deadLetter: null },
      { id: storedMessage(1).id, deliveries: 0, deadLetter: null },
    ]);
    reopened.close();
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

const fixtureV2 = readFileSync(join(import.meta.dir, "fixtures/store_v2.sql"), "utf8");

it("SqliteStore reads the checked-in store v2 fixture (delivery counts and dead letters)", async () => {
  const directory = temps.make();
  try {
    const db = new Database(join(directory, STORE_FILE));
    db.run(fixtureV2);
    db.close();
    const store = new SqliteStore({ directory, logger: memoryLogger() });
    const loaded = store.load();
    const hex = (text: string) => Uint8Array.from(Buffer.from(text, "hex"));
    expect(loaded.map(fields)).toEqual([
      { id: "k2b7.0", queue: "orders/v1", destination: "shop-1", created: 1769904001000, body: hex("a2626964016474657874657061706572") },
      { id: "k2b7.1", queue: "orders/v1", destination: "*", created: 1769904002000, body: new TextEncoder().encode('{"id":2}') },
      { id: "k2b7.3", queue: "mails/v2", destination: "ops", created: 1769904004000, body: new Uint8Array(0) },
      { id: "k2b7.1~9", queue: "dead/v1", destination: "shop-2", created: 1769904007000, body: new TextEncoder().encode('{"id":2}') },
      { id: "k2b7.6~10", queue: "dead/v1", destination: "*", created: 1769904008000, body: Uint8Array.from({ length: 16 }, (_, i) => i) },
    ]);
    expect(loaded.map(delivery)).toEqual([
      { id: "k2b7.0", deliveries: 0, deadLetter: null },
      { id: "k2b7.1", deliveries: 3, deadLetter: null },
      { id: "k2b7.3", deliveries: 1, deadLetter: null },
      { id: "k2b7.1~9", deliveries: 0, deadLetter: { reason: "requeueLimit", channel: "orders/v1/shop-2", messageId: "k2b7.1", deliveries: 5 } },
      { id: "k2b7.6~10", deliveries: 2, deadLetter: { reason: "ttl", channel: "orders/v1/*", messageId: "k2b7.6", deliveries: 0 } },
    ]);
    expect(store.meta(META.STORE_VERSION)).toBe(STORE_VERSION);
    expect(store.meta(META.EPOCH)).toBe(3);
    // Counts continue, new messages go after the old ones, loaded ones can be removed.
    store.noteDelivery(loaded[1]!, 4);
    store.remove(loaded[3]!);
    await store.append(storedMessage(1));
    store.close();
    const reopened = new SqliteStore({ directory, logger: memoryLogger() });
    expect(reopened.load().map((message) => [message.id, message.deliveries])).toEqual([
      ["k2b7.0", 0],
      ["k2b7.1", 4],
      ["k2b7.3", 1],
      ["k2b7.6~10", 2],
      [storedMessage(1).id, 0],
    ]);
    reopened.close();
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

const fixtureV3 = readFileSync(join(import.meta.dir, "fixtures/store_v3.sql"), "utf8");
const fixtureV4 = readFileSync(join(import.meta.dir, "fixtures/store_v4.sql"), "utf8");
const autoVacuum = (path: string) => {
  const db = new Database(path, { readonly: true });
  const { auto_vacuum } = db.query<{ auto_vacuum: number }, []>("PRAGMA auto_vacuum").get()!;
  db.close();
  return auto_vacuum;
};

it("SqliteStore upgrades the checked-in v3 fixture to v4: one VACUUM switches it to incremental vacuum, its rows unchanged", () => {
  const directory = temps.make();
  const path = join(directory, STORE_FILE);
  const db = new Database(path);
  db.run(fixtureV3);
  db.close();
  expect(autoVacuum(path)).toBe(0);
  const logger = memoryLogger();
  const store = new SqliteStore({ directory, logger });
  expect(logger.lines).toContain(`[info ] [store    ] directory=${directory};from=3;to=${STORE_VERSION};store upgraded`);
  expect(logger.lines.filter((line) => line.includes("switched to incremental vacuum (one VACUUM)")).length).toBe(1);
  expect(store.load().map((message) => [message.id, message.deliveries])).toEqual([["k3c9.0", 0], ["k3c9.2", 2], ["k3c9.3", 0], ["k3c9.3~7", 0]]);
  expect(store.queueUsage("orders/v1")).toEqual({ messages: 2, bytes: 153 });
  expect(store.meta(META.STORE_VERSION)).toBe(STORE_VERSION);
  expect(store.meta(META.EPOCH)).toBe(4);
  store.close();
  expect(autoVacuum(path)).toBe(2);
  // Once switched, a start does not rewrite it again.
  const again = memoryLogger();
  new SqliteStore({ directory, logger: again }).close();
  expect(again.lines.some((line) => line.includes("incremental vacuum") || line.includes("upgraded"))).toBe(false);
});

it("SqliteStore upgrades the checked-in v4 fixture to v5 without a VACUUM: its rows unchanged, with no delay", () => {
  const directory = temps.make();
  const db = new Database(join(directory, STORE_FILE));
  db.run(fixtureV4);
  db.close();
  expect(autoVacuum(join(directory, STORE_FILE))).toBe(2);
  const logger = memoryLogger();
  const store = new SqliteStore({ directory, logger });
  expect(logger.lines).toContain(`[info ] [store    ] directory=${directory};from=4;to=${STORE_VERSION};store upgraded`);
  expect(logger.lines.some((line) => line.includes("incremental vacuum"))).toBe(false);
  const loaded = store.load();
  expect(loaded.map(delivery)).toEqual([
    { id: "k4d1.0", deliveries: 1, deadLetter: null },
    { id: "k4d1.2", deliveries: 0, deadLetter: null },
    { id: "k4d1.2~5", deliveries: 0, deadLetter: { reason: "ttl", channel: "orders/v1/shop-2", messageId: "k4d1.2", deliveries: 0 } },
  ]);
  expect(loaded.map((message) => message.notBefore)).toEqual([0, 0, 0]);
  expect(store.meta(META.EPOCH)).toBe(9);
  store.close();
});

const fixtureV5 = readFileSync(join(import.meta.dir, "fixtures/store_v5.sql"), "utf8");

it("SqliteStore upgrades the checked-in store v5 fixture by recording the version: counts, dead letters and delays", () => {
  const directory = temps.make();
  const db = new Database(join(directory, STORE_FILE));
  db.run(fixtureV5);
  db.close();
  const logger = memoryLogger();
  const store = new SqliteStore({ directory, logger });
  expect(logger.lines.some((line) => line.includes("incremental vacuum"))).toBe(false);
  expect(logger.lines).toContain(`[info ] [store    ] directory=${directory};from=5;to=${STORE_VERSION};store upgraded`);
  const loaded = store.load();
  expect(loaded.map(delivery)).toEqual([
    { id: "k5e2.0", deliveries: 1, deadLetter: null },
    { id: "k5e2.2", deliveries: 2, deadLetter: null },
    { id: "k5e2.2~5", deliveries: 0, deadLetter: { reason: "ttl", channel: "orders/v1/shop-2", messageId: "k5e2.2", deliveries: 0 } },
  ]);
  expect(loaded.map((message) => message.notBefore)).toEqual([0, 1796083263000, 0]);
  expect(store.readQueue("orders/v1", 0, 10).map((message) => [message.id, message.notBefore])).toEqual([["k5e2.0", 0], ["k5e2.2", 1796083263000]]);
  expect(store.meta(META.EPOCH)).toBe(11);
  // A loaded message's delay can be changed, and a new one is written.
  store.noteDelay(loaded[0]!, 1796083300000);
  store.close();
  const reopened = new SqliteStore({ directory, logger: memoryLogger() });
  expect(reopened.load().map((message) => message.notBefore)).toEqual([1796083300000, 1796083263000, 0]);
  reopened.close();
});

const fixtureV6 = readFileSync(join(import.meta.dir, "fixtures/store_v6.sql"), "utf8");
const fixtureV6Journal = Buffer.from(readFileSync(join(import.meta.dir, "fixtures/store_v6_journal-a.hex"), "utf8").trim(), "hex");

it("SqliteStore upgrades the checked-in store v6 fixture by recording the version: its journal's frames read as generation 0", async () => {
  const directory = temps.make();
  const db = new Database(join(directory, STORE_FILE));
  db.run(fixtureV6);
  db.close();
  writeFileSync(join(directory, "journal-a"), fixtureV6Journal);
  const logger = memoryLogger();
  const store = new SqliteStore({ directory, logger });
  expect(logger.lines).toContain(`[info ] [store    ] directory=${directory};from=6;to=${STORE_VERSION};store upgraded`);
  expect(logger.lines.some((line) => line.includes("messages=2;journaled messages read back"))).toBe(true);
  // Counted before any settle: the rows from the table, the journaled messages from the journal.
  expect(store.queueUsage("orders/v1").messages).toBe(3);
  expect(store.queueUsage("dead/v1").messages).toBe(1);
  // Positions go on after the journal's highest, the removed one included; the next frame is
  // written after the v6 frames (generation 0 both), and read back with them after a crash.
  const next = storedMessage(1);
  await store.append(next);
  expect(next.position).toBe(6);
  expect(statSync(join(directory, "journal-a")).size).toBeGreaterThan(fixtureV6Journal.length);
  expect(snapshotMessages(directory).map((message) => message.id)).toEqual(["k6j.1", "k6j.2", "k6j.3", "k6j.5", next.id]);
  const loaded = store.load();
  expect(loaded.map((message) => [message.id, message.destination, message.deliveries, message.notBefore])).toEqual([
    ["k6j.1", "shop-1", 0, 0],
    ["k6j.2", "shop-1", 1, 0],
    ["k6j.3", "shop-1", 2, 0],
    ["k6j.5", "shop-1", 0, 1796083299000],
    [next.id, next.destination, 0, 0],
  ]);
  expect(loaded[3]!.queue).toBe("dead/v1");
  expect(loaded[3]!.deadLetter).toEqual({ reason: "requeueLimit", channel: "orders/v1/shop-1", messageId: "k6j.0", deliveries: 3 });
  expect(new TextDecoder().decode(loaded[2]!.body)).toBe("body 3");
  expect(store.meta(META.EPOCH)).toBe(12);
  store.close();
});

const fixtureV7 = readFileSync(join(import.meta.dir, "fixtures/store_v7.sql"), "utf8");
const fixtureV7Journal = (file: "a" | "b") =>
  Buffer.from(readFileSync(join(import.meta.dir, `fixtures/store_v7_journal-${file}.hex`), "utf8").trim(), "hex");

it("SqliteStore reads the checked-in store v7 fixture without an upgrade: what an earlier turn left past a recycled file's end is not taken back", async () => {
  const directory = temps.make();
  const db = new Database(join(directory, STORE_FILE));
  db.run(fixtureV7);
  db.close();
  writeFileSync(join(directory, "journal-a"), fixtureV7Journal("a"));
  writeFileSync(join(directory, "journal-b"), fixtureV7Journal("b"));
  const logger = memoryLogger();
  const store = new SqliteStore({ directory, logger });
  expect(logger.lines.some((line) => line.includes("upgraded"))).toBe(false);
  expect(store.queueUsage("orders/v1").messages).toBe(2);
  expect(store.queueUsage("dead/v1").messages).toBe(1);
  // The stale tail was cut at open; writing goes on in journal-b (the newer generation, though
  // it holds nothing live), at positions after the highest read.
  const bAtOpen = statSync(join(directory, "journal-b")).size;
  expect(bAtOpen).toBeLessThan(fixtureV7Journal("b").length);
  const next = storedMessage(1);
  await store.append(next);
  expect(next.position).toBe(7);
  expect(statSync(join(directory, "journal-a")).size).toBe(fixtureV7Journal("a").length);
  expect(statSync(join(directory, "journal-b")).size).toBeGreaterThan(bAtOpen);
  // Not k7j.2: its append is what generation 2 of journal-b left; its removal was written over.
  expect(snapshotMessages(directory).map((message) => message.id)).toEqual(["k7j.1", "k7j.3", "k7j.5", next.id]);
  const loaded = store.load();
  expect(loaded.map((message) => [message.id, message.deliveries, message.notBefore])).toEqual([
    ["k7j.1", 0, 0],
    ["k7j.3", 2, 0],
    ["k7j.5", 0, 1796083299000],
    [next.id, 0, 0],
  ]);
  expect(loaded[2]!.deadLetter).toEqual({ reason: "requeueLimit", channel: "orders/v1/shop-1", messageId: "k7j.0", deliveries: 3 });
  expect(store.meta(META.EPOCH)).toBe(13);
  store.close();
});

it("every store fixture, once opened, has the schema of a fresh store (UPGRADES match SCHEMA)", () => {
  const shape = (db: Database) =>
    ["meta", "messages"].map((table) => db.query(`SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info('${table}') ORDER BY cid`).all());
  const fresh = new Database(":memory:");
  for (const statement of SCHEMA) fresh.run(statement);
  expect((shape(fresh)[1] as { name: string }[]).map((column) => column.name)).toEqual([
    "seq",
    "id",
    "queue",
    "destination",
    "created",
    "body",
    "deliveries",
    "dead_letter",
    "not_before",
  ]);
  for (const [version, fixture] of [[1, fixtureV1], [2, fixtureV2], [3, fixtureV3], [4, fixtureV4], [5, fixtureV5], [6, fixtureV6], [7, fixtureV7]] as const) {
    const db = new Database(":memory:");
    db.run(fixture);
    expect(migrate(db, { directory: "/fixture" })).toBe(version);
    expect(shape(db)).toEqual(shape(fresh));
    expect(db.query("SELECT value FROM meta WHERE key = 'store_version'").get()).toEqual({ value: STORE_VERSION });
    db.close();
  }
  fresh.close();
});

it("migrate() runs each upgrade step in order and records the new version, in one transaction", () => {
  const db = new Database(":memory:");
  db.run(fixtureV1);
  const steps: number[] = [];
  const upgrades = {
    1: (db: Database) => {
      steps.push(1);
      db.run("ALTER TABLE messages ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 0");
    },
    2: () => {
      steps.push(2);
    },
  };
  expect(migrate(db, { directory: "/fixture", target: 3, upgrades })).toBe(1);
  expect(steps).toEqual([1, 2]);
  expect(db.query("SELECT value FROM meta WHERE key = 'store_version'").get()).toEqual({ value: 3 });
  expect(db.query("SELECT id, deliveries FROM messages ORDER BY seq LIMIT 1").get()).toEqual({ id: "k1a2.0", deliveries: 0 });
  db.close();

  // A missing step refuses the store and leaves it as it was.
  const old = new Database(":memory:");
  old.run(fixtureV1);
  expect(() => migrate(old, { directory: "/fixture", target: 3, upgrades: { 1: upgrades[1] } })).toThrow(
    'Cannot open the store in "/fixture": no upgrade from store version 2 to 3',
  );
  expect(old.query("SELECT value FROM meta WHERE key = 'store_version'").get()).toEqual({ value: 1 });
  expect(old.query("SELECT count(*) AS n FROM pragma_table_info('messages') WHERE name = 'deliveries'").get()).toEqual({ n: 0 });
  old.close();
});

it("SqliteStore.setMeta() writes a value that survives reopening (cluster epoch)", () => {
  const directory = temps.make();
  try {
    const store = new SqliteStore({ directory, logger: memoryLogger() });
    expect(store.meta(META.EPOCH)).toBe(0);
    expect(store.meta("missing")).toBeNull();
    store.setMeta(META.EPOCH, 12);
    store.close();
    expect(() => store.meta(META.EPOCH)).toThrow(/closed/);
    const reopened = new SqliteStore({ directory, logger: memoryLogger() });
    expect(reopened.meta(META.EPOCH)).toBe(12);
    reopened.close();
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
});

it("SqliteStore creates a missing data directory and logs where it opened", () => {
  const parent = temps.make();
  try {
    const logger = memoryLogger();
    const directory = join(parent, "a", "b");
    const store = new SqliteStore({ directory, mode: "batch", logger });
    expect(existsSync(join(directory, STORE_FILE))).toBe(true);
    expect(logger.lines).toEqual([`[info ] [store    ] directory=${directory};mode=batch;version=${STORE_VERSION};store opened`]);
    store.close();
  } finally {
    rmSync(parent, { recursive: true, force: true });
  }
});
