/**
 * The row statements of a commit write exactly the rows asked for: a multi-row INSERT and the
 * single ones after it, and DELETEs of runs of positions that go no further than the run.
 */
import { Database } from "bun:sqlite";
import { afterEach, beforeEach, describe, expect, it } from "bun:test";
import { CommitSync } from "../../../src/server/store/database.ts";
import { SCHEMA } from "../../../src/server/store/record.ts";
import { RowWrites } from "../../../src/server/store/row_writes.ts";
import type { StoredMessage } from "../../../src/server/store/store.ts";

let db: Database;
let writes: RowWrites;
beforeEach(() => {
  db = new Database(":memory:");
  for (const statement of SCHEMA) db.run(statement);
  writes = new RowWrites(db, new CommitSync(db));
});
afterEach(() => {
  writes.finalize();
  db.close();
});

function message(n: number): StoredMessage {
  const body: Uint8Array = new Uint8Array([n & 0xff, 7]);
  return {
    id: `m${n}`,
    queue: n % 2 === 0 ? "even/v1" : "odd/v1",
    destination: `d${n % 3}`,
    body,
    created: 1_000 + n,
    deliveries: 0,
    deadLetter: n === 5 ? { reason: "ttl", channel: "odd/v1/d2", messageId: "m5", deliveries: 2 } : null,
    position: undefined,
  };
}

const seqs = () => (db.query("SELECT seq FROM messages ORDER BY seq").values() as number[][]).map(([seq]) => seq!);

describe("RowWrites", () => {
  it("inserts every append, 16 to a statement and the rest one by one, each row with its own values, count and delay", () => {
    const appends = new Map<number, StoredMessage>();
    for (let n = 1; n <= 37; n++) appends.set(100 + n, message(n));
    writes.insert(appends, (m) => Number(m.id.slice(1)) % 4, (m) => (Number(m.id.slice(1)) % 3 === 0 ? 1_800_000_000_000 + Number(m.id.slice(1)) : 0));
    const rows = db.query("SELECT seq, id, queue, destination, created, body, deliveries, dead_letter, not_before FROM messages ORDER BY seq").values();
    expect(rows.length).toBe(37);
    rows.forEach((row, i) => {
      const n = i + 1;
      const m = message(n);
      expect(row.slice(0, 5)).toEqual([100 + n, m.id, m.queue, m.destination, m.created]);
      expect([...(row[5] as Uint8Array)]).toEqual([...m.body]);
      expect(row[6]).toBe(n % 4);
      expect(row[7] === null ? null : JSON.parse(row[7] as string)).toEqual(n === 5 ? { reason: "ttl", channel: "odd/v1/d2", messageId: "m5", deliveries: 2 } : null);
      expect(row[8]).toBe(n % 3 === 0 ? 1_800_000_000_000 + n : 0);
    });
  });

  it("writes each delay given to its row only, the latest over an earlier one", () => {
    const appends = new Map<number, StoredMessage>();
    for (let n = 1; n <= 5; n++) appends.set(n, message(n));
    writes.insert(appends, () => 0, () => 0);
    writes.updateNotBefore([2, 1_800_000_000_500, 4, 1_800_000_000_100]);
    writes.updateNotBefore([4, 1_800_000_000_050]); // a later nack with a shorter delay
    const delays = db.query("SELECT seq, not_before FROM messages ORDER BY seq").values();
    expect(delays).toEqual([[1, 0], [2, 1_800_000_000_500], [3, 0], [4, 1_800_000_000_050], [5, 0]]);
  });

  it("deletes exactly the positions given, in any order, as runs and single rows, and only the first `count` of them", () => {
    const appends = new Map<number, StoredMessage>();
    for (let n = 1; n <= 40; n++) appends.set(n, message(n));
    writes.insert(appends, () => 0, () => 0);
    // Runs 3–7 and 20–22, single rows 10, 12 and 40, given out of order; 30 and 31 are past `count`.
    const gone = [22, 5, 10, 3, 40, 21, 6, 12, 7, 20, 4, 30, 31];
    writes.delete(gone, gone.length - 2);
    const kept = Array.from({ length: 40 }, (_, i) => i + 1).filter((seq) => !gone.slice(0, -2).includes(seq));
    expect(seqs()).toEqual(kept);
    writes.delete([8], 1);
    expect(seqs()).toEqual(kept.filter((seq) => seq !== 8));
  });

  it("runs one transaction of inserts, deletes, updates and the journal's settle position, or none of it when a part fails", () => {
    const first = new Map<number, StoredMessage>([[1, message(1)], [2, message(2)], [3, message(3)]]);
    writes.transaction({ ...NO_CHANGES, appends: first }, () => {});
    const changes = {
      appends: new Map<number, StoredMessage>([[4, message(4)]]),
      deliveries: () => 0,
      notBefore: () => 0,
      removes: [1, 2],
      deletes: 1,
      updates: [3, 6],
      delays: null,
      journalThrough: { key: "journal_through", seq: 4 },
    };
    const through = () => db.query<{ value: number }, []>("SELECT value FROM meta WHERE key = 'journal_through'").get()?.value ?? null;
    expect(() => writes.transaction(changes, () => {
      throw new Error("disk I/O error");
    })).toThrow("disk I/O error");
    expect(db.inTransaction).toBe(false);
    expect(seqs()).toEqual([1, 2, 3]);
    expect(through()).toBeNull();
    writes.transaction(changes, () => {});
    expect(seqs()).toEqual([2, 3, 4]); // only the first `deletes` of the removes
    expect(db.query("SELECT deliveries FROM messages WHERE seq = 3").values()).toEqual([[6]]);
    expect(through()).toBe(4);
  });
});

const NO_CHANGES = { appends: new Map(), deliveries: () => 0, notBefore: () => 0, removes: [], deletes: 0, updates: null, delays: null, journalThrough: null };
