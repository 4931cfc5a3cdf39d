/** Byte helpers shared by the hand-written readers (hot_ops.ts, body.ts). */

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** UTF-8 bytes to a string; undefined when they are not valid UTF-8. */
export function decodeText(bytes: Uint8Array): string | undefined {
  try {
    return utf8.decode(bytes);
  } catch {
    return undefined;
  }
}

/**
 * A copy of `data[start, end)` in memory of its own. `data.slice()` is not one when `data` is a
 * Node or Bun `Buffer`, as socket chunks are: there `slice()` returns a view, which would pin the
 * whole chunk and share its bytes with whoever holds the chunk.
 */
export function copyBytes(data: Uint8Array, start = 0, end = data.length): Uint8Array<ArrayBuffer> {
  const copy = new Uint8Array(end - start);
  copy.set(data.subarray(start, end));
  return copy;
}

/** True when `bytes` equals `data[start, end)`. */
export function equalsAt(bytes: Uint8Array, data: Uint8Array, start: number, end: number): boolean {
  if (bytes.length !== end - start) return false;
  for (let i = 0; i < bytes.length; i++) if (bytes[i] !== data[start + i]) return false;
  return true;
}
