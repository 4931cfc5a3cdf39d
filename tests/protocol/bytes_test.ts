import { expect, it } from "bun:test";
import { copyBytes, readAscii } from "../../src/protocol/bytes.ts";

it("copyBytes() copies a range of a Buffer into memory of its own", () => {
  // A Buffer's slice() is a view; socket chunks are Buffers.
  const chunk = Buffer.from([10, 11, 12, 13, 14]);
  const copy = copyBytes(chunk, 1, 3);
  expect(copy).toBeInstanceOf(Uint8Array);
  expect([...copy]).toEqual([11, 12]);
  expect(copy.buffer).not.toBe(chunk.buffer);
  expect(copy.buffer.byteLength).toBe(2); // does not pin the chunk
  copy[0] = 99;
  expect([...chunk]).toEqual([10, 11, 12, 13, 14]);
  chunk[2] = 77;
  expect([...copy]).toEqual([99, 12]);
});

it("copyBytes() copies the whole input by default", () => {
  const chunk = Buffer.from([1, 2, 3, 4]);
  const copy = copyBytes(chunk);
  expect([...copy]).toEqual([1, 2, 3, 4]);
  copy[3] = 40;
  chunk[0] = 100;
  expect([...chunk]).toEqual([100, 2, 3, 4]);
  expect([...copy]).toEqual([1, 2, 3, 40]);
  expect([...copyBytes(chunk, 2)]).toEqual([3, 4]); // from `start` to the end
});

it("readAscii() reads an ASCII range of a Uint8Array or a Buffer as a string of its own, and leaves any other byte to the caller", () => {
  const bytes = new TextEncoder().encode("xx k7.123456 é.1 yy");
  // Bun has Buffer's one-call reader: the fast path is taken here (Deno, which has none, falls back).
  expect(readAscii(bytes, 3, 12)).toBe("k7.123456");
  expect(readAscii(Buffer.from(bytes), 3, 12)).toBe("k7.123456");
  expect(readAscii(bytes, 0, 0)).toBe("");
  const accented = bytes.indexOf(0xc3);
  expect(readAscii(bytes, accented, accented + 4)).toBeUndefined(); // "é.1": UTF-8, decoded by the caller
  expect(readAscii(bytes, accented - 1, accented)).toBe(" ");
});
