/**
 * PendingSends (pending_sends.ts) on its own: what it keeps of a send that waits.
 */
import { expect, it } from "bun:test";
import { KittenError } from "../../src/protocol/mod.ts";
import { type PendingSend, PendingSends } from "../../src/client/pending_sends.ts";

it("a refused send keeps a copy of its frame of its own, not the buffer it shares with the sends made next to it", () => {
  const written: PendingSend[] = [];
  const sends = new PendingSends({ write: (send) => written.push(send), resend: () => {}, whyNoMaster: () => null });
  // Two frames side by side in one buffer, as SendFrames writes them.
  const shared = new Uint8Array(64).map((_, i) => i);
  sends.add(1, "q/v1/x", shared.subarray(0, 10), 60_000).catch(() => {});
  sends.add(2, "q/v1/x", shared.subarray(10, 20), 60_000).catch(() => {});
  const [refused, confirmed] = written as [PendingSend, PendingSend];
  sends.refused(refused, new KittenError("NOT_ENOUGH_REPLICAS", "Cannot store: too few replicas in sync"));
  expect(refused.frame.buffer).not.toBe(shared.buffer);
  expect(refused.frame.buffer.byteLength).toBe(10);
  expect([...refused.frame]).toEqual([...shared.subarray(0, 10)]);
  // Refused again: still the same copy (made once).
  const copy = refused.frame;
  sends.refused(refused, new KittenError("NOT_ENOUGH_REPLICAS", "Cannot store: too few replicas in sync"));
  expect(refused.frame).toBe(copy);
  // A send that was not refused stays a view: the common case pays for no copy.
  expect(confirmed.frame.buffer).toBe(shared.buffer);
  sends.rejectAll(() => new KittenError("CLOSED", "Cannot send: closed"));
});
