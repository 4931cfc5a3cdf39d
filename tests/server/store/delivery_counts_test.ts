/**
 * A delivery count becomes due only once its delivery is `delayMs` old: each commit stamps the
 * counts noted since the one before, and a count is due under a stamp that old. A count noted
 * just before an older one falls due is not written with it.
 */
import { describe, expect, it } from "bun:test";
import { DeliveryCounts } from "../../../src/server/store/delivery_counts.ts";
import type { StoredMessage } from "../../../src/server/store/store.ts";

function stored(n: number): StoredMessage {
  return { id: `m${n}`, queue: "q/v1", destination: "d", body: new Uint8Array([n]), created: 1, position: n };
}

/** A DeliveryCounts on a clock the test moves. */
function counts(delayMs: number) {
  const clock = { now: 0 };
  return { clock, counts: new DeliveryCounts(delayMs, () => clock.now) };
}

function dueIds(counts: DeliveryCounts): [string, number][] {
  return [...counts.due].map(([message, count]) => [message.id, count]);
}

describe("DeliveryCounts", () => {
  it("does not make a count due with an older one: each waits delayMs from its own commit", () => {
    const { clock, counts: c } = counts(100);
    const [a, b] = [stored(1), stored(2)];
    c.note(a, 1);
    clock.now = 1;
    c.ripen(false); // stamps a at 1
    clock.now = 95;
    c.note(b, 1);
    clock.now = 101;
    c.ripen(false); // stamps b at 101; a's stamp is 100 ms old
    expect(dueIds(c)).toEqual([["m1", 1]]);
    clock.now = 150;
    c.ripen(false);
    expect(dueIds(c)).toEqual([["m1", 1]]);
    clock.now = 201;
    c.ripen(false);
    expect(dueIds(c)).toEqual([["m1", 1], ["m2", 1]]);
  });

  it("drops the count of a message removed before its count fell due", () => {
    const { clock, counts: c } = counts(100);
    const [acked, held] = [stored(1), stored(2)];
    c.note(acked, 1);
    c.note(held, 2);
    clock.now = 5;
    c.ripen(false);
    acked.position = undefined; // acked: the store forgot its row
    clock.now = 105;
    c.ripen(false);
    expect(dueIds(c)).toEqual([["m2", 2]]);
    expect(c.hasRecent).toBe(false);
  });

  it("keeps the highest count of a message noted several times", () => {
    const { clock, counts: c } = counts(10);
    const message = stored(1);
    c.note(message, 2);
    c.note(message, 5);
    c.note(message, 3);
    clock.now = 10;
    c.ripen(false);
    clock.now = 20;
    c.ripen(false);
    expect(dueIds(c)).toEqual([["m1", 5]]);
  });

  it("note() is true for the first count since the last stamp only", () => {
    const { clock, counts: c } = counts(100);
    expect(c.note(stored(1), 1)).toBe(true);
    expect(c.note(stored(2), 1)).toBe(false);
    clock.now = 3;
    c.ripen(false);
    expect(c.note(stored(3), 1)).toBe(true);
    expect(c.note(stored(4), 1)).toBe(false);
  });

  it("nextDueInMs() tells when the oldest stamped counts fall due, null with none stamped", () => {
    const { clock, counts: c } = counts(100);
    expect(c.nextDueInMs()).toBeNull();
    c.note(stored(1), 1);
    expect(c.nextDueInMs()).toBeNull(); // noted, not stamped yet
    clock.now = 4;
    c.ripen(false);
    clock.now = 54;
    expect(c.nextDueInMs()).toBe(50);
    clock.now = 300;
    expect(c.nextDueInMs()).toBe(0);
    c.ripen(false);
    expect(c.nextDueInMs()).toBeNull();
  });

  it("ripen(true) makes every count due, stamped or not", () => {
    const { clock, counts: c } = counts(60_000);
    c.note(stored(1), 1);
    clock.now = 1;
    c.ripen(false);
    c.note(stored(2), 4);
    c.ripen(true);
    expect(dueIds(c)).toEqual([["m1", 1], ["m2", 4]]);
    expect(c.hasRecent).toBe(false);
    expect(c.nextDueInMs()).toBeNull();
  });

  it("with a delay of 0, the next commit writes what was noted before it", () => {
    const { counts: c } = counts(0);
    c.note(stored(1), 1);
    c.ripen(false);
    expect(dueIds(c)).toEqual([["m1", 1]]);
  });

  it("stays exact over many commits, as stamped counts fall due and leave", () => {
    const { clock, counts: c } = counts(50);
    const messages = Array.from({ length: 20_000 }, (_, i) => stored(i + 1));
    const expected = new Map<string, number>();
    for (let i = 0; i < messages.length; i++) {
      const message = messages[i]!;
      c.note(message, 1 + (i % 3));
      if (i % 4 === 0) message.position = undefined; // acked before it fell due
      else expected.set(message.id, 1 + (i % 3));
      if (i % 100 === 99) {
        clock.now += 10;
        c.ripen(false);
        // Everything due was noted under a stamp at least 50 ms old: at most the last 6 stamps wait.
        expect(c.due.size).toBeGreaterThanOrEqual(Math.max(0, Math.floor(i / 100) - 5) * 75);
      }
    }
    clock.now += 1000;
    c.ripen(false);
    expect(c.due.size).toBe(expected.size);
    for (const [message, count] of c.due) expect(count).toBe(expected.get(message.id)!);
    expect(c.pending).toBe(expected.size);
  });
});
