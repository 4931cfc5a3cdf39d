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

/** True when `bytes` equals `data[start, end)`. */
export function equalsAt(bytes: Uint8Array, data: Uint8Array, start: number, end: number): boolean {
  if (bytes.length !== end - start) return false;
  for (let i = 0; i < bytes.length; i++) if (bytes[i] !== data[start + i]) return false;
  return true;
}
