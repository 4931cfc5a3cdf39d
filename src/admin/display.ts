/**
 * Message bodies for people: the broker carries bodies as opaque CBOR bytes; the admin API
 * decodes them only to show them, into values JSON can carry.
 */
import { decode } from "../protocol/cbor.ts";
import type { CopyInfo } from "../server/mod.ts";

/** Longest body preview in message listings: a page of 1 MiB bodies must stay a small reply. */
export const PREVIEW_CHARS = 200;

/** The decoded body, made JSON-safe; undecodable bytes come back as `{ $bytes: base64 }`. */
export function displayBody(body: Uint8Array): unknown {
  try {
    return toJsonSafe(decode(body), 0);
  } catch {
    return { $undecodable: true, $bytes: Buffer.from(body).toString("base64") };
  }
}

/**
 * Largest body a listing decodes for its preview. A preview is a prefix, but CBOR cannot be
 * decoded in part: a page of 1,000 copies of 1 MiB bodies would build gigabytes of JSON on the
 * broker's event loop to keep 200 characters of each. Larger bodies say their size instead;
 * GET the message itself to see it whole.
 */
export const PREVIEW_MAX_BYTES = 4096;

/** One line of JSON, cut at `PREVIEW_CHARS`. */
export function previewBody(body: Uint8Array): string {
  if (body.byteLength > PREVIEW_MAX_BYTES) return `(${body.byteLength} bytes: open the message to see it)`;
  const text = JSON.stringify(displayBody(body)) ?? "undefined";
  return text.length > PREVIEW_CHARS ? `${text.slice(0, PREVIEW_CHARS - 1)}…` : text;
}

/** A copy as listings show it: no bytes, a preview, the channel it was sent to. */
export function copyView(queue: string, copy: CopyInfo) {
  return {
    messageId: copy.messageId,
    channel: `${queue}/${copy.destination}`,
    destination: copy.destination,
    state: copy.state,
    created: copy.created,
    deliveries: copy.deliveries,
    due: copy.due,
    group: copy.group,
    size: copy.body.byteLength,
    preview: previewBody(copy.body),
    deadLetter: copy.deadLetter,
  };
}

/** One message with all its live copies (a fan-out has one per listening client and one for consumers). */
export function messageView(queue: string, copies: CopyInfo[]) {
  const first = copies[0]!;
  return {
    messageId: first.messageId,
    queue,
    created: first.created,
    size: first.body.byteLength,
    body: displayBody(first.body),
    deadLetter: first.deadLetter,
    copies: copies.map((copy) => ({
      channel: `${queue}/${copy.destination}`,
      destination: copy.destination,
      state: copy.state,
      deliveries: copy.deliveries,
      due: copy.due,
      group: copy.group,
    })),
  };
}

/** Byte strings → `{ $bytes }`, Maps → objects, bigints → strings; deep values stop at 64 levels. */
function toJsonSafe(value: unknown, depth: number): unknown {
  if (depth > 64) return "…";
  if (value instanceof Uint8Array) return { $bytes: Buffer.from(value).toString("base64") };
  if (typeof value === "bigint") return value.toString();
  if (value instanceof Date) return value.toISOString();
  if (value instanceof Map) {
    return Object.fromEntries([...value].map(([key, item]) => [String(key), toJsonSafe(item, depth + 1)]));
  }
  if (Array.isArray(value)) return value.map((item) => toJsonSafe(item, depth + 1));
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, toJsonSafe(item, depth + 1)]));
  }
  if (typeof value === "number" && !Number.isFinite(value)) return String(value);
  return value;
}
