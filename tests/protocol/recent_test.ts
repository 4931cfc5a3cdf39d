import { expect, it } from "bun:test";
import { RecentMap } from "../../src/protocol/recent.ts";

it("RecentMap.set() evicts the oldest key once full", () => {
  const recent = new RecentMap<string, number>(3);
  for (const [index, key] of ["a", "b", "c", "d"].entries()) recent.set(key, index);
  expect(recent.has("a")).toBe(false);
  expect([...recent.entries()]).toEqual([["b", 1], ["c", 2], ["d", 3]]);
  expect(recent.size).toBe(3);
});

it("RecentMap.set() of a present key replaces its value without changing the order", () => {
  const recent = new RecentMap<string, number>(2);
  recent.set("a", 1);
  recent.set("b", 2);
  recent.set("a", 10);
  recent.set("c", 3); // evicts "a", the oldest added
  expect([...recent.entries()]).toEqual([["b", 2], ["c", 3]]);
});

it("RecentMap.delete() leaves a hole that entries() skips and eviction tolerates", () => {
  const recent = new RecentMap<number, string>(3);
  recent.set(1, "x");
  recent.set(2, "y");
  recent.delete(1);
  expect([...recent.keys()]).toEqual([2]);
  recent.set(3, "z");
  recent.set(4, "w"); // evicts slot of 1 (already gone)
  expect([...recent.keys()]).toEqual([2, 3, 4]);
  expect(recent.get(4)).toBe("w");
});

it("RecentMap keeps a large window cheaply when it cycles many times", () => {
  const recent = new RecentMap<number, true>(1000);
  for (let i = 0; i < 100_000; i++) recent.set(i, true);
  expect(recent.size).toBe(1000);
  expect(recent.has(98_999)).toBe(false);
  expect(recent.has(99_000)).toBe(true);
  expect([...recent.keys()][0]).toBe(99_000);
});
