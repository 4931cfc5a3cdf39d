/**
 * What the bench publishers send: every body carries its sequence number `seq` (receivers count
 * unique messages by it) and its send time `t` on the shared clock (receivers take the latency).
 */
import { now } from "./stats.ts";

export interface Payload {
  seq: number;
  t: number;
  [key: string]: unknown;
}

/** The ~100-byte object every `npm run bench` message carries (about 95 bytes once CBOR-encoded). */
export function payload(seq: number): Payload {
  return { seq, t: now(), type: "order.created", user: "user-004217", amount: 1234.5, currency: "EUR", items: 3 };
}

/**
 * `{seq, t, pad}` with a pad of `length` characters: `kitten-mq bench --size` chooses the length
 * that makes the body that many bytes of CBOR (src/bench/scenarios.ts). The pad is made once.
 */
export function paddedPayload(length: number): (seq: number) => Payload {
  const pad = "x".repeat(length);
  return (seq) => ({ seq, t: now(), pad });
}
