import { describe, expect, it } from "bun:test";
import { MinHeap } from "../../src/server/internal/heap.ts";
import { mulberry32 as rng } from "../helpers/random.ts";


interface Item {
  at: number;
  id: number;
}

describe("MinHeap", () => {
  it("MinHeap is empty at first: pop() and peek() return undefined, popDue() returns []", () => {
    const h = new MinHeap<Item>();
    expect(h.length).toBe(0);
    expect(h.pop()).toBeUndefined();
    expect(h.peek()).toBeUndefined();
    expect(h.popDue(Number.MAX_SAFE_INTEGER)).toEqual([]);
  });

  it("MinHeap.pop() returns items in `at` order for random inputs (several seeds, duplicates included)", () => {
    for (const seed of [1, 2, 3, 7, 1234]) {
      const next = rng(seed);
      const h = new MinHeap<Item>();
      const items: Item[] = [];
      const count = 1 + Math.floor(next() * 500);
      for (let id = 0; id < count; id++) {
        const item = { at: Math.floor(next() * 100), id }; // small range: many equal `at`
        items.push(item);
        h.push(item);
        expect(h.length).toBe(id + 1);
      }
      expect(h.peek()!.at).toBe(Math.min(...items.map((i) => i.at)));
      const popped: Item[] = [];
      for (let x = h.pop(); x !== undefined; x = h.pop()) popped.push(x);
      expect(popped.length).toBe(count);
      expect(popped.map((i) => i.at)).toEqual(items.map((i) => i.at).sort((a, b) => a - b));
      expect(new Set(popped.map((i) => i.id)).size).toBe(count); // each item exactly once
      expect(h.length).toBe(0);
    }
  });

  it("MinHeap stays ordered under interleaved random push and pop", () => {
    const next = rng(99);
    const h = new MinHeap<Item>();
    const model: number[] = [];
    for (let step = 0; step < 5_000; step++) {
      if (next() < 0.6 || model.length === 0) {
        const at = Math.floor(next() * 10_000);
        h.push({ at, id: step });
        model.push(at);
        model.sort((a, b) => a - b);
      } else {
        expect(h.pop()!.at).toBe(model.shift()!);
      }
      expect(h.length).toBe(model.length);
      expect(h.peek()?.at).toBe(model[0]);
    }
  });

  it("MinHeap.popDue(now) removes exactly the items with at <= now, earliest first, and keeps the rest", () => {
    const next = rng(5);
    const h = new MinHeap<Item>();
    const ats: number[] = [];
    for (let id = 0; id < 300; id++) {
      const at = Math.floor(next() * 1000);
      ats.push(at);
      h.push({ at, id });
    }
    const due = h.popDue(500);
    const expected = ats.filter((a) => a <= 500).sort((a, b) => a - b);
    expect(due.map((i) => i.at)).toEqual(expected);
    expect(h.length).toBe(300 - expected.length);
    expect([...h].every((i) => i.at > 500)).toBe(true);
    expect(h.popDue(500)).toEqual([]);
    const rest = h.popDue(1000).map((i) => i.at);
    expect(rest).toEqual(ats.filter((a) => a > 500).sort((a, b) => a - b));
    expect(h.length).toBe(0);
  });

  it("MinHeap.popDue() includes an item due exactly now and excludes one due a millisecond later", () => {
    const h = new MinHeap<Item>();
    h.push({ at: 11, id: 1 });
    h.push({ at: 10, id: 0 });
    expect(h.popDue(9)).toEqual([]);
    expect(h.popDue(10).map((i) => i.id)).toEqual([0]);
    expect(h.peek()!.id).toBe(1);
  });

  it("MinHeap iterator yields every held item", () => {
    const h = new MinHeap<Item>();
    for (const at of [5, 3, 9, 1]) h.push({ at, id: at });
    expect([...h].map((i) => i.at).sort((a, b) => a - b)).toEqual([1, 3, 5, 9]);
    expect(h.length).toBe(4);
  });
});
