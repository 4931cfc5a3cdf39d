/** Byte helpers of the frame tests: bodies that differ from frame to frame, and copies to compare. */

export function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

/** Bytes 0..n-1 shifted by `start`, so that bodies of different frames differ. */
export function bytes(n: number, start = 0): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (start + i * 7) & 0xff;
  return out;
}

/** Copies of the bodies, so that comparisons never depend on buffers reused later. */
export function copies(frames: Uint8Array[]): number[][] {
  return frames.map((f) => [...f]);
}
