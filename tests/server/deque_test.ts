import { describe, expect, it } from "bun:test";
import { Deque } from "../../src/server/internal/deque.ts";
import { mulberry32 as rng } from "../helpers/random.ts";


describe("Deque", () => {
  it("Deque is empty at first: length 0, shift() and peek() return undefined", () => {
    const d = new Deque<number>();
    expect(d.length).toBe(0);
    expect(d.shift()).toBeUndefined();
    expect(d.peek()).toBeUndefined();
    expect([...d]).toEqual([]);
  });

  it("Deque.push()/shift() keep FIFO order across growth beyond the initial capacity", () => {
    const d = new Deque<number>(2);
    for (let i = 0; i < 100; i++) d.push(i);
    expect(d.length).toBe(100);
    expect(d.peek()).toBe(0);
    const out: number[] = [];
    for (let x = d.shift(); x !== undefined; x = d.shift()) out.push(x);
    expect(out).toEqual(Array.from({ length: 100 }, (_, i) => i));
    expect(d.length).toBe(0);
  });

  it("Deque keeps FIFO order when the ring wraps around and then grows while wrapped", () => {
    const d = new Deque<number>(4);
    d.push(1);
    d.push(2);
    d.push(3);
    expect(d.shift()).toBe(1);
    expect(d.shift()).toBe(2);
    // head is now at index 2: these pushes wrap to the start of the buffer
    d.push(4);
    d.push(5);
    d.push(6);
    expect([...d]).toEqual([3, 4, 5, 6]);
    // full and wrapped: the next push grows the buffer, which must unroll the ring in order
    d.push(7);
    d.push(8);
    expect(d.length).toBe(6);
    expect(d.peek()).toBe(3);
    expect([...d]).toEqual([3, 4, 5, 6, 7, 8]);
    const out: number[] = [];
    for (let x = d.shift(); x !== undefined; x = d.shift()) out.push(x);
    expect(out).toEqual([3, 4, 5, 6, 7, 8]);
  });

  it("Deque matches an array model under a random mix of push, shift and peek", () => {
    const next = rng(42);
    const d = new Deque<number>(3);
    const model: number[] = [];
    let n = 0;
    for (let step = 0; step < 20_000; step++) {
      const r = next();
      if (r < 0.55) {
        d.push(n);
        model.push(n++);
      } else if (r < 0.95) {
        expect(d.shift()).toBe(model.shift());
      } else {
        expect(d.peek()).toBe(model[0]);
        expect([...d]).toEqual(model);
      }
      expect(d.length).toBe(model.length);
    }
    expect([...d]).toEqual(model);
  });

  it("Deque created with capacity 0 still grows and keeps FIFO order", () => {
    const d = new Deque<number>(0);
    for (let i = 0; i < 5; i++) d.push(i);
    expect(d.length).toBe(5);
    expect([...d]).toEqual([0, 1, 2, 3, 4]);
    expect(d.shift()).toBe(0);
    expect(d.peek()).toBe(1);
  });

  it("Deque.shift() releases the slot (no stale reference stays in the ring)", () => {
    const d = new Deque<object>(4);
    const a = {};
    d.push(a);
    d.shift();
    d.push({});
    expect([...d]).not.toContain(a);
    expect(d.length).toBe(1);
  });

  it("Deque.removeWhere() returns removed items in order and keeps the others in order, also when wrapped", () => {
    const d = new Deque<number>(4);
    d.push(100);
    d.push(101);
    d.shift();
    d.shift();
    for (let i = 0; i < 10; i++) d.push(i); // wrapped, then grown
    const removed = d.removeWhere((x) => x % 3 === 0);
    expect(removed).toEqual([0, 3, 6, 9]);
    expect([...d]).toEqual([1, 2, 4, 5, 7, 8]);
    expect(d.length).toBe(6);
    expect(d.peek()).toBe(1);
    // still a working FIFO afterwards
    d.push(10);
    expect(d.shift()).toBe(1);
    expect([...d]).toEqual([2, 4, 5, 7, 8, 10]);
  });

  it("Deque.removeWhere() with no match leaves the deque untouched and returns []", () => {
    const d = new Deque<number>();
    for (let i = 0; i < 5; i++) d.push(i);
    expect(d.removeWhere(() => false)).toEqual([]);
    expect([...d]).toEqual([0, 1, 2, 3, 4]);
    expect(d.removeWhere(() => true)).toEqual([0, 1, 2, 3, 4]);
    expect(d.length).toBe(0);
    expect(d.shift()).toBeUndefined();
  });

  it("Deque.clear() empties it and it can be reused", () => {
    const d = new Deque<number>();
    for (let i = 0; i < 40; i++) d.push(i);
    d.clear();
    expect(d.length).toBe(0);
    expect(d.peek()).toBeUndefined();
    d.push(7);
    expect([...d]).toEqual([7]);
  });

  it("Deque iterator yields items head to tail without consuming them", () => {
    const d = new Deque<string>(2);
    d.push("a");
    d.push("b");
    d.shift();
    d.push("c");
    d.push("d");
    expect([...d]).toEqual(["b", "c", "d"]);
    expect([...d]).toEqual(["b", "c", "d"]);
    expect(d.length).toBe(3);
  });
});
