import { describe, expect, it } from "bun:test";
import { DECLINED, decodeBody, readBody } from "../../src/protocol/body.ts";
import { decode, encode } from "../../src/protocol/cbor.ts";
import { mulberry32 } from "../helpers/random.ts";

/** What the generic decoder gives for `bytes`: its value, or the message of what it threw. */
function generic(bytes: Uint8Array): { value?: unknown; error?: string } {
  try {
    return { value: decode(bytes) };
  } catch (error) {
    return { error: (error as Error).message };
  }
}

function fast(bytes: Uint8Array): { value?: unknown; error?: string } {
  try {
    return { value: decodeBody(bytes) };
  } catch (error) {
    return { error: (error as Error).message };
  }
}

/** Random JSON-like values from a seed, so that a failure can be replayed. */
function random(seed: number) {
  const next = mulberry32(seed);
  const int = (n: number) => Math.floor(next() * n);
  const words = ["id", "seq", "user", "type", "amount", "é", "🐱", "", "order.created", "a".repeat(40), "é".repeat(20) + "🐱"];
  const value = (depth: number): unknown => {
    const kind = int(depth > 3 ? 8 : 11);
    switch (kind) {
      case 0: return int(30);
      case 1: return int(2 ** 31) * (next() < 0.5 ? 1 : -1);
      case 2: return (int(2 ** 21) * 2 ** 31 + int(2 ** 31)) * (next() < 0.5 ? 1 : -1);
      case 3: return (next() - 0.5) * 10 ** int(12);
      case 4: return words[int(words.length)]! + (next() < 0.3 ? String(int(1000)) : "");
      case 5: return [true, false, null, undefined][int(4)];
      case 6: return new Uint8Array(Array.from({ length: int(20) }, () => int(256)));
      case 7: return [Infinity, -Infinity, 0.5, -0, 65504][int(5)];
      case 8: return Array.from({ length: int(5) }, () => value(depth + 1));
      default: {
        const object: Record<string, unknown> = {};
        for (let i = int(6); i > 0; i--) object[words[int(words.length)]! + int(3)] = value(depth + 1);
        return object;
      }
    }
  };
  return { value, int };
}

describe("decodeBody", () => {
  it("gives exactly what decode() gives for 20,000 random JSON-like values", () => {
    const rng = random(20261202);
    for (let i = 0; i < 20_000; i++) {
      const bytes = encode(rng.value(0));
      expect(fast(bytes)).toEqual(generic(bytes));
    }
  });

  it("reads the common shapes itself, without the generic decoder", () => {
    const payload = { seq: 7, t: 1_764_000_000_000.25, type: "order.created", user: "user-004217", amount: 1234.5 };
    const shapes: unknown[] = [payload, [payload, payload], "text", 42, -7, 2 ** 40, true, null, new Uint8Array([1]), {}];
    for (const shape of shapes) {
      const bytes = encode(shape);
      expect(readBody(bytes)).not.toBe(DECLINED);
      expect(readBody(bytes)).toEqual(decode(bytes));
    }
  });

  it("decodes repeated bytes to an equal string and different bytes to their own string", () => {
    const a = decodeBody(encode({ currency: "EUR" })) as { currency: string };
    const b = decodeBody(encode({ currency: "EUR" })) as { currency: string };
    const c = decodeBody(encode({ currency: "USD" })) as { currency: string };
    expect(a.currency).toBe("EUR");
    expect(b.currency).toBe("EUR");
    expect(c.currency).toBe("USD");
    // Thousands of distinct short strings: slots are shared, a wrong hit would show here.
    for (let i = 0; i < 10_000; i++) {
      const key = `k${i.toString(36)}`;
      expect(decodeBody(encode({ [key]: key }))).toEqual({ [key]: key });
    }
  });

  it("decodeBody never writes into the bytes it reads", () => {
    // Socket chunks are Buffers, whose slice() is a view: a string cache that kept such a view and
    // later reused its slot (same length, different bytes) would overwrite an earlier chunk.
    const inputs: Buffer[] = [];
    const copies: Uint8Array[] = [];
    for (let i = 0; i < 5_000; i++) {
      const user = "user-" + String(i).padStart(5, "0");
      const input = Buffer.from(encode({ user }));
      inputs.push(input);
      copies.push(Uint8Array.from(input));
      expect(decodeBody(input)).toEqual({ user });
    }
    const changed = inputs.flatMap((input, i) => (input.equals(copies[i]!) ? [] : [i]));
    expect(changed).toEqual([]);
  });

  it("leaves tags, non-text keys, __proto__ and indefinite lengths to decode()", () => {
    const cases: Uint8Array[] = [
      encode(new Date(1_700_000_000_000)),
      encode(new Map<unknown, unknown>([[1, "one"], [true, "yes"]])),
      new Uint8Array([0xa1, 0x69, ...new TextEncoder().encode("__proto__"), 0x01]),
      new Uint8Array([0x9f, 0x01, 0x02, 0xff]), // indefinite-length array
      new Uint8Array([0xbf, 0x61, 0x61, 0x01, 0xff]), // indefinite-length map
    ];
    for (const bytes of cases) {
      expect(readBody(bytes)).toBe(DECLINED);
      expect(fast(bytes)).toEqual(generic(bytes));
    }
    expect(Object.getPrototypeOf(decodeBody(cases[2]!))).toBe(Object.prototype);
  });

  it("fails where decode() fails, with its error: truncated, trailing, malformed", () => {
    const body = encode({ seq: 1, user: "user-004217", tags: ["a", "b"] });
    const cases: Uint8Array[] = [
      body.subarray(0, body.length - 1),
      new Uint8Array([...body, 0x00]),
      new Uint8Array([0x1c]), // reserved additional information
      new Uint8Array([0x9a, 0xff, 0xff, 0xff, 0xff]), // an array longer than the input
      new Uint8Array([]),
    ];
    for (const bytes of cases) {
      const result = generic(bytes);
      expect(result.error).toBeDefined();
      expect(fast(bytes)).toEqual(result);
    }
    for (let cut = 0; cut < body.length; cut++) {
      const result = generic(body.subarray(0, cut));
      expect(result.error).toBeDefined();
      expect(fast(body.subarray(0, cut))).toEqual(result);
    }
  });

  it("replaces invalid UTF-8 like decode()", () => {
    const bytes = new Uint8Array([0x62, 0xc3, 0x28]); // text of 2 bytes: a cut-short sequence, then "("
    expect(generic(bytes)).toEqual({ value: "\uFFFD(" });
    expect(fast(bytes)).toEqual(generic(bytes));
    const withBadKey = new Uint8Array([0xa1, 0x62, 0xc3, 0x28, 0x01]); // the same text as a map key
    expect(generic(withBadKey)).toEqual({ value: { "\uFFFD(": 1 } });
    expect(fast(withBadKey)).toEqual(generic(withBadKey));
  });

  it("reads half, single and double precision floats", () => {
    const cases: [number[], number][] = [
      [[0xf9, 0x3c, 0x00], 1],
      [[0xf9, 0xc4, 0x00], -4],
      [[0xf9, 0x00, 0x01], 2 ** -24],
      [[0xf9, 0x7c, 0x00], Infinity],
      [[0xfa, 0x47, 0xc3, 0x50, 0x00], 100000],
      [[0xfb, 0x3f, 0xf1, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a], 1.1],
    ];
    for (const [bytes, expected] of cases) {
      expect(decodeBody(new Uint8Array(bytes))).toBe(expected);
      expect(decode(new Uint8Array(bytes))).toBe(expected);
    }
    expect(Number.isNaN(decodeBody(new Uint8Array([0xf9, 0x7e, 0x00])))).toBe(true);
  });

  it("handles nesting deeper than its own limit through decode()", () => {
    let value: unknown = 1;
    for (let i = 0; i < 200; i++) value = [value];
    const bytes = encode(value);
    expect(decodeBody(bytes)).toEqual(decode(bytes));
  });

  it("gives byte strings as Uint8Array with the same bytes", () => {
    const bytes = encode({ data: new Uint8Array([1, 2, 3]) });
    const value = decodeBody(bytes) as { data: Uint8Array };
    expect(value.data).toBeInstanceOf(Uint8Array);
    expect([...value.data]).toEqual([1, 2, 3]);
  });
});
