import { describe, expect, it } from "bun:test";
import { decode, encode } from "../../src/protocol/cbor.ts";

const text = new TextEncoder();

/** A CBOR text string header and bytes (lengths below 24 only). */
function cborText(value: string): number[] {
  const bytes = [...text.encode(value)];
  if (bytes.length >= 24) throw new Error("test helper: text too long");
  return [0x60 + bytes.length, ...bytes];
}

/** Runs `fn`, which must throw, and returns what it threw. */
function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error("expected a throw");
}

describe("cbor", () => {
  it("encode() and decode() round-trip nested values", () => {
    const value = {
      a: [1, -2, 3.5, "x", null, true, false, { b: { c: [[], {}, [[1]]] } }],
      s: "héllo ✓ 🐱",
      big: 2 ** 40,
      negative: -(2 ** 40),
      empty: "",
    };
    expect(decode(encode(value))).toEqual(value);
  });

  it("encode() and decode() round-trip a Uint8Array as a byte string", () => {
    const body = new Uint8Array([0, 1, 2, 254, 255]);
    const decoded = decode(encode([10, 7, "e/v1/1", "m-1", body])) as unknown[];
    expect(decoded.slice(0, 4)).toEqual([10, 7, "e/v1/1", "m-1"]);
    const bytes = decoded[4];
    expect(bytes).toBeInstanceOf(Uint8Array);
    expect([...(bytes as Uint8Array)]).toEqual([0, 1, 2, 254, 255]);
    const empty = decode(encode(new Uint8Array(0)));
    expect(empty).toBeInstanceOf(Uint8Array);
    expect((empty as Uint8Array).length).toBe(0);
  });

  it("encode() writes plain CBOR without cbor-x records or tags", () => {
    expect([...encode([10, 1])]).toEqual([0x82, 0x0a, 0x01]);
    expect([...encode(new Uint8Array([1, 2]))]).toEqual([0x42, 0x01, 0x02]);
    expect([...encode("ab")]).toEqual([0x62, 0x61, 0x62]);
    const map = encode({ a: 1 });
    expect(map[0]! >> 5).toBe(5); // major type 5: map, not a tag (6)
    expect(decode(new Uint8Array([0xa1, ...cborText("a"), 0x01]))).toEqual({ a: 1 });
  });

  it("decode() returns byte strings as views into its input", () => {
    const bytes = encode([42, new Uint8Array([7, 8, 9])]);
    const view = (decode(bytes) as [number, Uint8Array])[1];
    expect(view.buffer).toBe(bytes.buffer);
    bytes[bytes.length - 1] = 0;
    expect([...view]).toEqual([7, 8, 0]);
  });

  it('decode() keeps a "__proto__" key from polluting prototypes', () => {
    // {"__proto__": {"polluted": 1}}, written by hand: encode() would never produce it.
    const bytes = new Uint8Array([0xa1, ...cborText("__proto__"), 0xa1, ...cborText("polluted"), 0x01]);
    const value = decode(bytes) as Record<string, unknown>;
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(value.polluted).toBeUndefined();
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.prototype).not.toHaveProperty("polluted");
    expect(Object.hasOwn(value, "__proto__")).toBe(false);
    // cbor-x renames the key; the data is kept, harmlessly.
    expect(Object.keys(value)).toEqual(["__proto_"]);
    expect(value.__proto_).toEqual({ polluted: 1 });
  });

  it('decode() keeps nested "__proto__" and "constructor" keys from polluting prototypes', () => {
    // [{"constructor": {"prototype": {"polluted": 1}}}, {"a": {"__proto__": {"polluted": 2}}}]
    const bytes = new Uint8Array([
      0x82,
      0xa1,
      ...cborText("constructor"),
      0xa1,
      ...cborText("prototype"),
      0xa1,
      ...cborText("polluted"),
      0x01,
      0xa1,
      ...cborText("a"),
      0xa1,
      ...cborText("__proto__"),
      0xa1,
      ...cborText("polluted"),
      0x02,
    ]);
    const value = decode(bytes) as [Record<string, unknown>, { a: Record<string, unknown> }];
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.getPrototypeOf(value[1].a)).toBe(Object.prototype);
    expect(value[1].a.polluted).toBeUndefined();
    expect(Object.getPrototypeOf(value[0])).toBe(Object.prototype);
  });

  it("decode() throws a RangeError on 100,000 levels of nested arrays", () => {
    const deep = new Uint8Array(100_001).fill(0x81);
    deep[100_000] = 0x00;
    const error = thrown(() => decode(deep));
    expect(error).toBeInstanceOf(RangeError);
    // The decoder is still usable afterwards.
    expect(decode(encode([30, 1]))).toEqual([30, 1]);
  });

  it("decode() throws on every truncation of a valid value", () => {
    const bytes = encode([10, 1, "e/v1/1", "m-1", new Uint8Array([1, 2, 3]), { k: [1.5, "x"] }]);
    for (let length = 0; length < bytes.length; length++) {
      expect(thrown(() => decode(bytes.subarray(0, length)))).toBeInstanceOf(Error);
    }
    // A byte string whose declared length runs past the end.
    expect(thrown(() => decode(new Uint8Array([0x5a, 0xff, 0xff, 0xff, 0xff, 1, 2])))).toBeInstanceOf(Error);
    // An array that announces 2^32-1 items but holds none.
    expect(thrown(() => decode(new Uint8Array([0x9a, 0xff, 0xff, 0xff, 0xff])))).toBeInstanceOf(Error);
    expect(decode(bytes)).toEqual([10, 1, "e/v1/1", "m-1", new Uint8Array([1, 2, 3]), { k: [1.5, "x"] }]);
  });

  it("decode() throws on bytes left after one value", () => {
    expect(thrown(() => decode(new Uint8Array([0x01, 0x02])))).toBeInstanceOf(Error);
    expect(thrown(() => decode(new Uint8Array([0x82, 0x01, 0x02, 0x00])))).toBeInstanceOf(Error);
  });
});
