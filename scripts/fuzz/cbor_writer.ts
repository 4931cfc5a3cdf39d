/**
 * A CBOR writer that can say anything (cbor-x's encoder only says what JS values mean): raw item
 * bytes, maps with keys of any type and duplicates, any tag; and `framed()`, which puts a length
 * prefix (true or not) in front of a body.
 */

/** A raw CBOR item, spliced as is. */
export class Raw {
  constructor(readonly bytes: Uint8Array) {}
}
/** A CBOR map with keys of any type, in order, duplicates allowed. */
export class CMap {
  constructor(readonly entries: [unknown, unknown][]) {}
}
export class CTag {
  constructor(readonly tag: number, readonly value: unknown) {}
}

/** A growable byte buffer (deeply nested inputs are hundreds of KiB). */
class Out {
  buf = new Uint8Array(256);
  len = 0;
  #reserve(n: number): void {
    if (this.len + n <= this.buf.length) return;
    const next = new Uint8Array(Math.max(this.buf.length * 2, this.len + n));
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
  }
  push(...bytes: number[]): void {
    this.#reserve(bytes.length);
    for (const byte of bytes) this.buf[this.len++] = byte;
  }
  bytes(bytes: Uint8Array): void {
    this.#reserve(bytes.length);
    this.buf.set(bytes, this.len);
    this.len += bytes.length;
  }
}

function head(major: number, n: number, out: Out): void {
  const m = major << 5;
  if (n < 24) out.push(m | n);
  else if (n < 0x100) out.push(m | 24, n);
  else if (n < 0x10000) out.push(m | 25, n >> 8, n & 0xff);
  else if (n < 0x100000000) out.push(m | 26, (n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff);
  else {
    const hi = Math.floor(n / 0x100000000);
    const lo = n >>> 0;
    out.push(m | 27, (hi >>> 24) & 0xff, (hi >>> 16) & 0xff, (hi >>> 8) & 0xff, hi & 0xff);
    out.push((lo >>> 24) & 0xff, (lo >>> 16) & 0xff, (lo >>> 8) & 0xff, lo & 0xff);
  }
}

const textEncoder = new TextEncoder();

function write(value: unknown, out: Out): void {
  if (value instanceof Raw) out.bytes(value.bytes);
  else if (value === null) out.push(0xf6);
  else if (value === undefined) out.push(0xf7);
  else if (value === false) out.push(0xf4);
  else if (value === true) out.push(0xf5);
  else if (typeof value === "number") {
    if (Number.isSafeInteger(value)) head(value >= 0 ? 0 : 1, value >= 0 ? value : -1 - value, out);
    else {
      const view = new DataView(new ArrayBuffer(8));
      view.setFloat64(0, value);
      out.push(0xfb);
      out.bytes(new Uint8Array(view.buffer));
    }
  } else if (typeof value === "string") {
    const bytes = textEncoder.encode(value);
    head(3, bytes.length, out);
    out.bytes(bytes);
  } else if (value instanceof Uint8Array) {
    head(2, value.length, out);
    out.bytes(value);
  } else if (Array.isArray(value)) {
    head(4, value.length, out);
    for (const item of value) write(item, out);
  } else if (value instanceof CMap) {
    head(5, value.entries.length, out);
    for (const [k, v] of value.entries) {
      write(k, out);
      write(v, out);
    }
  } else if (value instanceof CTag) {
    head(6, value.tag, out);
    write(value.value, out);
  } else {
    throw new TypeError(`cannot write ${typeof value}`);
  }
}

export function cbor(value: unknown): Uint8Array {
  const out = new Out();
  write(value, out);
  return out.buf.slice(0, out.len);
}

export function framed(body: Uint8Array, length = body.length): Uint8Array {
  const out = new Uint8Array(4 + body.length);
  new DataView(out.buffer).setUint32(0, length >>> 0);
  out.set(body, 4);
  return out;
}
