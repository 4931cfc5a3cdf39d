/**
 * SendFrames (send_frames.ts): the message ids a client gives its sends.
 */
import { expect, it } from "bun:test";
import { FRAME_HEADER_SIZE, readSend } from "../../src/protocol/mod.ts";
import { FIRST_ID_COUNTER, SendFrames } from "../../src/client/send_frames.ts";
import { RecentIds } from "../../src/server/dedup.ts";

/** The message ids of `count` sends made by one SendFrames, in send order. */
function idsOf(frames: SendFrames, count: number): string[] {
  const ids: string[] = [];
  for (let ref = 1; ref <= count; ref++) {
    const frame = frames.frame(ref, "orders/v1/1", { n: ref });
    ids.push(readSend(frame, FRAME_HEADER_SIZE)!.messageId);
  }
  return ids;
}

it("SendFrames gives one client's sends ids of one length that sort in send order (a broker's index by id grows at its end)", () => {
  // 2,000 sends: past 36 and 1,296, where counters written as short as they go would gain a digit.
  const ids = idsOf(new SendFrames(), 2_000);
  expect(new Set(ids).size).toBe(ids.length);
  expect(new Set(ids.map((id) => id.length)).size).toBe(1);
  expect([...ids].sort()).toEqual(ids);
  const [prefix, counter] = ids[0]!.split(".");
  expect(counter).toBe(FIRST_ID_COUNTER.toString(36));
  expect(counter).toHaveLength(8);
  expect(ids.every((id) => id.startsWith(`${prefix}.`))).toBe(true);
});

it("SendFrames' ids differ from one client to the next, and a broker recognises them when resent", () => {
  const first = idsOf(new SendFrames(), 100);
  const second = idsOf(new SendFrames(), 100);
  expect(first.some((id) => second.includes(id))).toBe(false);
  const recent = new RecentIds();
  for (const id of first) recent.add(id);
  expect(first.every((id) => recent.has(id))).toBe(true);
  expect(second.some((id) => recent.has(id))).toBe(false);
});

it("SendFrames writes one group's frames one after the other in buffers of its own, never into another group's", () => {
  const group = new SendFrames();
  const other = new SendFrames();
  const first = group.frame(1, "orders/v1/1", { n: 1 });
  const second = group.frame(2, "orders/v1/1", { n: 2 });
  const elsewhere = other.frame(1, "orders/v1/1", { n: 1 });
  // Views, not copies: the sends of a burst share one buffer...
  expect(second.buffer).toBe(first.buffer);
  expect(second.byteOffset).toBe(first.byteOffset + first.length);
  // ...which holds only this group's sends: a group whose sends wait keeps no other's alive.
  expect(elsewhere.buffer).not.toBe(first.buffer);
  expect(readSend(first, FRAME_HEADER_SIZE)!.ref).toBe(1);
  expect(readSend(second, FRAME_HEADER_SIZE)!.ref).toBe(2);
});

it("SendFrames' counter carries from z to 0 digit by digit, and gains a digit once every digit was z", () => {
  const ids = idsOf(new SendFrames(36 ** 8 - 38), 4);
  expect(ids.map((id) => id.split(".")[1])).toEqual(["zzzzzzyy", "zzzzzzyz", "zzzzzzz0", "zzzzzzz1"]);
  const last = idsOf(new SendFrames(36 ** 8 - 2), 3);
  expect(last.map((id) => id.split(".")[1])).toEqual(["zzzzzzzy", "zzzzzzzz", "100000000"]);
  expect(new Set(last.map((id) => id.split(".")[0])).size).toBe(1);
});

it("SendFrames counts like base-36 toString from its first counter, across every digit's carry", () => {
  const start = 36 ** 7 + 36 ** 3 - 5;
  const ids = idsOf(new SendFrames(start), 50_000);
  expect(ids.every((id, n) => id.split(".")[1] === (start + n).toString(36))).toBe(true);
});
