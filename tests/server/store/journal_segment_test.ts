/**
 * One journal file as the broker keeps it: its live messages in position order, counted, and the
 * acked ones dropped from memory once they outnumber the live four to one.
 */
import { afterAll, expect, it } from "bun:test";
import { closeSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { COMPACT_FROM, JournalSegment } from "../../../src/server/store/journal_segment.ts";
import type { StoredMessage } from "../../../src/server/store/store.ts";
import { TempDirs } from "../../helpers/temp_dir.ts";
import { storedMessage } from "./store_conformance.ts";

const temps = new TempDirs("kitten-segment-");
const opened: JournalSegment[] = [];
afterAll(() => {
  for (const file of opened) closeSync(file.fd);
  temps.removeAll();
});

function segment(): JournalSegment {
  const file = new JournalSegment(join(temps.make(), "journal-a"), { appends: new Map(), removes: [], validBytes: 0, fileBytes: 0, generation: 0 });
  opened.push(file);
  return file;
}

function add(file: JournalSegment, count: number): StoredMessage[] {
  return Array.from({ length: count }, (_, i) => {
    const message = storedMessage(i + 1, { position: i + 1 });
    file.add(message);
    return message;
  });
}

/** What the store does on an ack: the position goes, then the file is told. */
function ack(file: JournalSegment, message: StoredMessage): void {
  message.position = undefined;
  file.removed(message);
}

it("keeps its live messages in position order, counted with their bytes", () => {
  const file = segment();
  const messages = add(file, 10);
  for (const message of messages.filter((_, i) => i % 3 === 0)) ack(file, message);
  expect([...file.live()].map(([seq]) => seq)).toEqual([2, 3, 5, 6, 8, 9]);
  expect(file.liveCount).toBe(6);
  expect(file.liveBytes).toBe(messages.filter((_, i) => i % 3 !== 0).reduce((sum, m) => sum + m.body.length, 0));
  expect([file.firstSeq, file.lastSeq]).toEqual([1, 10]);
});

it(`drops acked messages from memory once they are four times the live ones (past ${COMPACT_FROM} kept)`, () => {
  const file = segment();
  const messages = add(file, 5 * COMPACT_FROM);
  // The last fifth stays live; acking the rest compacts as it goes.
  for (const message of messages.slice(0, 4 * COMPACT_FROM)) ack(file, message);
  expect(file.messages.length).toBeLessThan(4 * COMPACT_FROM);
  expect(file.messages.length).toBe(file.seqs.length);
  expect([...file.live()].map(([seq]) => seq)).toEqual(messages.slice(4 * COMPACT_FROM).map((m) => m.position!));
  // Under COMPACT_FROM in all, nothing is copied.
  const small = segment();
  const few = add(small, COMPACT_FROM - 1);
  for (const message of few.slice(0, -1)) ack(small, message);
  expect(small.messages.length).toBe(COMPACT_FROM - 1);
  expect(small.liveCount).toBe(1);
});

it("emptied, it forgets every message and its positions start over, in the generation it is given", () => {
  const file = segment();
  add(file, 3);
  file.size = 100;
  expect(file.empty(4)).toBe(true);
  expect([file.liveCount, file.liveBytes, file.size, file.firstSeq, file.lastSeq, file.messages.length]).toEqual([0, 0, 0, Infinity, 0, 0]);
  expect(file.generation).toBe(4);
  expect([...file.live()]).toEqual([]);
});

it("recycled, it forgets every message and is written from its start, keeping its bytes", () => {
  const file = segment();
  add(file, 3);
  writeFileSync(file.path, new Uint8Array(100));
  file.size = 100;
  file.recycle(7);
  expect([file.liveCount, file.liveBytes, file.size, file.firstSeq, file.lastSeq, file.messages.length]).toEqual([0, 0, 0, Infinity, 0, 0]);
  expect(file.generation).toBe(7);
  expect(statSync(file.path).size).toBe(100);
});

it("settled through a position, the messages up to it are live no more, each looked at once", () => {
  const file = segment();
  const messages = add(file, 10);
  ack(file, messages[1]!); // position 2, removed before the settle
  file.settleThrough(4);
  expect([...file.live()].map(([seq]) => seq)).toEqual([5, 6, 7, 8, 9, 10]);
  expect(file.liveCount).toBe(6);
  expect(file.liveBytes).toBe(messages.slice(4).reduce((sum, m) => sum + m.body.length, 0));
  file.settleThrough(3); // already covered: nothing changes
  expect(file.liveCount).toBe(6);
  file.settleThrough(10);
  expect([file.liveCount, file.liveBytes, file.settledThrough]).toEqual([0, 0, 10]);
  expect([...file.live()]).toEqual([]);
});
