import { expect, it } from "bun:test";
import { RecentIds } from "../../src/server/dedup.ts";

it("RecentIds.has() recognises an id added before, per sender prefix", () => {
  const ids = new RecentIds();
  expect(ids.has("abc.0")).toBe(false);
  ids.add("abc.0");
  ids.add("abc.1");
  expect(ids.has("abc.0")).toBe(true);
  expect(ids.has("abc.1")).toBe(true);
  expect(ids.has("abc.2")).toBe(false);
  expect(ids.has("other.0")).toBe(false);
});

it("RecentIds tracks out-of-order counters and fills the gap later", () => {
  const ids = new RecentIds();
  ids.add("p.a"); // 10
  ids.add("p.c"); // 12: 11 missing
  expect(ids.has("p.b")).toBe(false);
  expect(ids.has("p.c")).toBe(true);
  ids.add("p.b");
  expect(ids.has("p.b")).toBe(true);
  // Below the first counter seen: never stored here (refused, say), so not a duplicate…
  expect(ids.has("p.9")).toBe(false);
  ids.add("p.9"); // …until it is accepted
  expect(ids.has("p.9")).toBe(true);
  expect(ids.has("p.8")).toBe(false);
});

it("RecentIds treats the oldest gaps as seen once more than 4096 are open", () => {
  const ids = new RecentIds();
  ids.add("g.0");
  for (let counter = 2; counter < 2 + 4097 * 2; counter += 2) ids.add(`g.${counter.toString(36)}`);
  // Counter 1 was never added, but it is now outside the bounded window.
  expect(ids.has("g.1")).toBe(true);
  // A recent gap is still known to be unseen.
  expect(ids.has(`g.${(2 + 4097 * 2 - 3).toString(36)}`)).toBe(false);
});

it("RecentIds remembers ids of other shapes in a bounded map", () => {
  const ids = new RecentIds();
  ids.add("no-dot-here");
  ids.add("upper.CASE");
  expect(ids.has("no-dot-here")).toBe(true);
  expect(ids.has("upper.CASE")).toBe(true);
  expect(ids.has("upper.case")).toBe(false);
});

it("RecentIds keeps senders apart when ids alternate between them", () => {
  const ids = new RecentIds();
  for (let counter = 0; counter < 100; counter++) {
    ids.add(`alice.${counter.toString(36)}`);
    if (counter % 2 === 0) ids.add(`bob.${counter.toString(36)}`);
  }
  expect(ids.has("alice.2r")).toBe(true); // 99
  expect(ids.has("bob.2r")).toBe(false);
  expect(ids.has("bob.2q")).toBe(true); // 98
});

it("RecentIds.seed() recognises exactly the ids given, and infers nothing from their gaps", () => {
  const ids = new RecentIds();
  // Stored before a restart: counters 10, 12 and 40 of one sender (11 and 13–39 were acked since).
  ids.seed(["s.a", "s.c", "s.14", "plain-id"]);
  expect(ids.has("s.a")).toBe(true);
  expect(ids.has("s.c")).toBe(true);
  expect(ids.has("s.14")).toBe(true);
  expect(ids.has("plain-id")).toBe(true);
  expect(ids.has("s.b")).toBe(false);
  expect(ids.has("s.13")).toBe(false);
  expect(ids.has("s.9")).toBe(false);
  // The sender's new sends start its watermark as usual; the seeded ids stay recognised below it.
  ids.add("s.15");
  ids.add("s.16");
  expect(ids.has("s.16")).toBe(true);
  expect(ids.has("s.17")).toBe(false);
  expect(ids.has("s.a")).toBe(true);
  expect(ids.has("s.b")).toBe(false);
});

it("RecentIds.seed() of a sender already seen adds to what it knows", () => {
  const ids = new RecentIds();
  ids.add("t.5");
  ids.add("t.6");
  ids.seed(["t.1", "t.3"]);
  expect(ids.has("t.1")).toBe(true);
  expect(ids.has("t.2")).toBe(false);
  expect(ids.has("t.3")).toBe(true);
  expect(ids.has("t.6")).toBe(true);
  expect(ids.has("t.7")).toBe(false);
});

it("RecentIds.clear() forgets every id, seeded, tracked by counter or not", () => {
  const ids = new RecentIds();
  ids.seed(["u.1", "other"]);
  ids.add("u.5");
  ids.add("v.0");
  ids.clear();
  for (const id of ["u.1", "other", "u.5", "v.0"]) expect(ids.has(id)).toBe(false);
  ids.add("u.6");
  expect(ids.has("u.6")).toBe(true);
  expect(ids.has("u.5")).toBe(false);
});
