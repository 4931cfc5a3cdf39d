/**
 * encodeBody (body_encode.ts): JSON-like bodies written by hand read back exactly as the generic
 * encoder's do; anything else is the generic encoder's own bytes.
 */
import { expect, it } from "bun:test";
import { decode, encode } from "../../src/protocol/cbor.ts";
import { encodeBody } from "../../src/protocol/body_encode.ts";
import { mulberry32 } from "../helpers/random.ts";

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
/** A copy of the view encodeBody hands out (the next call reuses its buffer). */
const bodyOf = (value: unknown) => encodeBody(value).slice();

it("encodeBody writes the shortest heads: integers, text, arrays and maps", () => {
  expect(hex(bodyOf({ a: 1 }))).toBe("a1616101");
  expect(hex(bodyOf([0, 23, 24, 255, 256, 65_535, 65_536, 2 ** 32, -1, -25]))).toBe(
    "8a" + "00" + "17" + "1818" + "18ff" + "190100" + "19ffff" + "1a00010000" + "1b0000000100000000" + "20" + "3818",
  );
  expect(hex(bodyOf([true, false, null, "", "é"]))).toBe("85" + "f5" + "f4" + "f6" + "60" + "62c3a9");
  expect(hex(bodyOf(1.5))).toBe("fb3ff8000000000000");
  expect(hex(bodyOf(Number.MAX_SAFE_INTEGER))).toBe("1b001fffffffffffff");
});

it("encodeBody reads back equal to the generic encoder's, whatever the sizes", () => {
  const manyKeys = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i]));
  const values: unknown[] = [
    { seq: 1, t: 1_733_000_000_123.25, type: "order.created", user: "user-004217", amount: 1234.5, currency: "EUR", items: 3 },
    { nested: { deeper: [1, [2, [3, { x: "y" }]]] }, empty: {}, list: [] },
    { text: "x".repeat(70_000), unicode: "zoë ☕ 猫 🐈" },
    manyKeys(23),
    manyKeys(24),
    manyKeys(300),
    manyKeys(70_000),
    Array.from({ length: 70_000 }, (_, i) => i),
    { big: 2 ** 60, negativeBig: -(2 ** 60), tiny: 5e-324, nan: NaN, inf: -Infinity, negativeZero: -0 },
    "just a string",
    42,
  ];
  for (const value of values) {
    const body = bodyOf(value);
    expect(decode(body)).toEqual(decode(encode(value)) as never);
  }
});

it("encodeBody hands what is not JSON-like to the generic encoder: the same bytes", () => {
  class Point {
    constructor(readonly x: number) {}
  }
  const values: unknown[] = [
    new Date(1_733_000_000_000),
    new Map([["a", 1]]),
    new Uint8Array([1, 2, 3]),
    { inside: new Uint8Array([4]) },
    { missing: undefined },
    [1, , 3], // a hole reads as undefined
    { point: new Point(1) },
    { deep: JSON.parse("[".repeat(70) + "]".repeat(70)) },
    { big: 10n ** 30n },
    { surrogate: "\ud800 alone" },
  ];
  for (const value of values) expect(hex(bodyOf(value))).toBe(hex(encode(value)));
});

it("encodeBody agrees with the generic encoder on 2,000 random JSON-like values", () => {
  const random = mulberry32(25);
  const pick = <T>(items: T[]): T => items[Math.floor(random() * items.length)]!;
  const text = () => pick(["", "a", "key", "zoë", "☕", "x".repeat(30), "y".repeat(300)]) + Math.floor(random() * 1000);
  const number = () => pick([0, 1, -1, 23, 24, 255, 256, 65_536, 2 ** 31, 2 ** 40, -(2 ** 40), 0.5, -2.25, 1e300]) * (random() < 0.5 ? 1 : -1);
  const value = (depth: number): unknown => {
    const kind = depth > 3 ? Math.floor(random() * 4) : Math.floor(random() * 6);
    if (kind === 0) return text();
    if (kind === 1) return number();
    if (kind === 2) return pick([true, false, null]);
    if (kind === 3) return Math.floor(random() * 2 ** 52);
    if (kind === 4) return Array.from({ length: Math.floor(random() * 6) }, () => value(depth + 1));
    // Now and then a map of 24 entries or more: its head is written after its entries.
    const size = random() < 0.05 ? 24 + Math.floor(random() * 10) : Math.floor(random() * 8);
    return Object.fromEntries(Array.from({ length: size }, () => [text(), value(depth + 2)]));
  };
  for (let i = 0; i < 2_000; i++) {
    const input = value(0);
    const [mine, generic] = [decode(bodyOf(input)), decode(encode(input))];
    if (!Bun.deepEquals(mine, generic, true)) expect(mine).toEqual(generic as never); // the diff, on failure only
  }
});

it("encodeBody called from inside a body it writes (a getter that sends) leaves the outer body whole", () => {
  let inner: Uint8Array | null = null;
  const body = {
    before: "outer",
    get during() {
      inner = encodeBody({ inner: "message", n: 12_345 }).slice();
      return 1;
    },
    after: "x".repeat(40),
  };
  const outer = bodyOf(body);
  expect(decode(outer)).toEqual({ before: "outer", during: 1, after: "x".repeat(40) });
  expect(decode(inner!)).toEqual({ inner: "message", n: 12_345 });
});
