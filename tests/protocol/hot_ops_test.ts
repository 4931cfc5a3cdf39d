import { expect, it } from "bun:test";
import { decode, encode } from "../../src/protocol/cbor.ts";
import { FrameBatch, FrameDecoder } from "../../src/protocol/frame.ts";
import type { DeadLetterInfo } from "../../src/protocol/ops.ts";
import { OP } from "../../src/protocol/ops.ts";
import { peekOp, readDeliver, readSend, textItem, writeDeliver, writeOk, writeSend } from "../../src/protocol/hot_ops.ts";

/** writeSend with the channel and the id as strings. */
function writeSendText(batch: FrameBatch, ref: number, channel: string, messageId: string, body: Uint8Array): void {
  writeSend(batch, ref, textItem(channel), textItem(messageId), body);
}

function frames(write: (batch: FrameBatch) => void): Uint8Array[] {
  const batch = new FrameBatch(16);
  write(batch);
  return new FrameDecoder().push(batch.take());
}

it("writeSend() and writeDeliver() produce plain CBOR that the generic decoder reads", () => {
  const body = encode({ hello: "wörld", n: 1 });
  const [send, deliver] = frames((batch) => {
    writeSendText(batch, 70000, "e/v1/ïd", "abc.1z", body);
    writeDeliver(batch, 3, 2 ** 40, "abc.1z", "ïd", 2, body, 1_796_000_000_000);
  });
  expect(decode(send!)).toEqual([OP.SEND, 70000, "e/v1/ïd", "abc.1z", body]);
  expect(decode(deliver!)).toEqual([OP.DELIVER, 3, 2 ** 40, "abc.1z", "ïd", 2, body, 1_796_000_000_000]);
});

it("readDeliver() reads what writeDeliver() wrote, with repeated and changing ids and destinations", () => {
  const body = encode([1, 2, 3]);
  const cases: [string, string][] = [["p.0", "a"], ["p.1", "a"], ["q.zz", "b"], ["q.100", "b"], ["é-no-dot", "ç"], ["p.2", "a"]];
  const read = frames((batch) => {
    for (const [index, [id, destination]] of cases.entries()) writeDeliver(batch, index, index + 100, id, destination, index, body, 1000 + index);
  }).map((frame) => readDeliver(frame));
  expect(read.map((d) => [d?.messageId, d?.destination, d?.sub, d?.tag, d?.nbRequeues, d?.created])).toEqual(
    cases.map(([id, destination], index) => [id, destination, index, index + 100, index, 1000 + index]),
  );
  expect(decode(read[0]!.body)).toEqual([1, 2, 3]);
});

it("writeDeliver() and readDeliver() carry a dead letter's origin as the 9th element, plain CBOR to the generic decoder", () => {
  const body = encode("x");
  const origin: DeadLetterInfo = { reason: "requeueLimit", channel: "orders/v1/42", messageId: "p.7", deliveries: 3 };
  const [frame] = frames((batch) => writeDeliver(batch, 1, 2, "p.7~9", "42", 0, body, 5, origin));
  expect(decode(frame!)).toEqual([OP.DELIVER, 1, 2, "p.7~9", "42", 0, body, 5, origin]);
  expect(readDeliver(frame!)).toMatchObject({ sub: 1, tag: 2, messageId: "p.7~9", destination: "42", created: 5, deadLetter: origin });
  const [plain] = frames((batch) => writeDeliver(batch, 1, 2, "p.8", "42", 0, body, 5));
  expect(readDeliver(plain!)?.deadLetter).toBeUndefined();
});

it("peekOp() reads the operation of a frame without decoding it, and -1 for what is not [op, ...]", () => {
  const [send, ok] = frames((batch) => {
    writeSendText(batch, 1, "e/v1/a", "p.1", encode(1));
    writeOk(batch, [1], false);
  });
  expect(peekOp(send!)).toBe(OP.SEND);
  expect(peekOp(ok!)).toBe(OP.OK);
  expect(peekOp(new Uint8Array([0x9f, OP.SEND, 0xff]))).toBe(OP.SEND); // an indefinite-length array
  expect(peekOp(encode({ op: 1 }))).toBe(-1);
  expect(peekOp(encode([]))).toBe(-1);
  expect(peekOp(new Uint8Array(0))).toBe(-1);
});

it("readDeliver() returns undefined for other operations, a malformed dead-letter element, truncation and bad UTF-8", () => {
  const body = encode("x");
  const [okFrame] = frames((batch) => writeOk(batch, [1, 2], false));
  expect(readDeliver(okFrame!)).toBeUndefined();
  const deadLetter = encode([OP.DELIVER, 1, 2, "m.1", "d", 0, body, 5, { reason: "ttl" }]);
  expect(readDeliver(deadLetter)).toBeUndefined();
  const [good] = frames((batch) => writeDeliver(batch, 1, 2, "m.1", "d", 0, body, 5));
  for (let cut = 0; cut < good!.length; cut++) expect(readDeliver(good!.subarray(0, cut))).toBeUndefined();
  const bad = good!.slice();
  bad[bad.indexOf(0x6d)] = 0xff; // "m" of the id → an invalid UTF-8 byte
  expect(readDeliver(bad)).toBeUndefined();
});

it("readSend() reads what writeSend() wrote, with repeated and changing channels and id prefixes", () => {
  const cases: [number, string, string][] = [
    [1, "e/v1/a", "p.0"],
    [2, "e/v1/a", "p.1"],
    [300, "e/v1/b", "q.zz"],
    [2 ** 40, "é/v1/ç", "ü-no-dot"],
    [5, "e/v1/a", "p.2"],
  ];
  const read = frames((batch) => {
    for (const [ref, channel, id] of cases) writeSendText(batch, ref, channel, id, encode({ ref }));
  }).map((frame) => readSend(frame));
  expect(read.map((s) => [s?.ref, s?.channel, s?.messageId])).toEqual(cases);
  expect(read.map((s) => decode(s!.body))).toEqual(cases.map(([ref]) => ({ ref })));
});

it("readSend() leaves to the generic path what checkSend() would refuse or does not expect", () => {
  const body = encode("x");
  const [good] = frames((batch) => writeSendText(batch, 1, "e/v1/a", "m.1", body));
  expect(readSend(good!)).toMatchObject({ ref: 1, channel: "e/v1/a", messageId: "m.1" });
  for (let cut = 0; cut < good!.length; cut++) expect(readSend(good!.subarray(0, cut))).toBeUndefined();
  expect(readSend(new Uint8Array([...good!, 0]))).toBeUndefined(); // trailing byte
  const [emptyId] = frames((batch) => writeSendText(batch, 1, "e/v1/a", "", body));
  expect(readSend(emptyId!)).toBeUndefined();
  const [longId] = frames((batch) => writeSendText(batch, 1, "e/v1/a", "x".repeat(129), body));
  expect(readSend(longId!)).toBeUndefined();
  expect(readSend(encode([OP.SEND, -1, "e/v1/a", "m.1", body]))).toBeUndefined(); // negative ref
  expect(readSend(encode([OP.SEND, 1, "e/v1/a", "m.1", "not bytes"]))).toBeUndefined();
  expect(readSend(encode([OP.SEND, 1, "e/v1/a", "m.1", body, "extra"]))).toBeUndefined();
  const bad = good!.slice();
  bad[bad.indexOf(0x61)] = 0xff; // "a" of the channel → an invalid UTF-8 byte
  expect(readSend(bad)).toBeUndefined();
});

it("writeOk() marks a slave's confirmation", () => {
  const [master, slave] = frames((batch) => {
    writeOk(batch, [1, 300, 70000], false);
    writeOk(batch, [4], true);
  });
  expect(decode(master!)).toEqual([OP.OK, [1, 300, 70000]]);
  expect(decode(slave!)).toEqual([OP.OK, [4], "slave"]);
});

it("readDeliver() and readSend() read a frame in place inside a larger chunk, never past its end", () => {
  const body = encode({ n: 1 });
  const batch = new FrameBatch(16);
  writeDeliver(batch, 1, 2, "m.1", "d", 0, body, 5);
  writeSendText(batch, 7, "e/v1/a", "m.2", body);
  writeDeliver(batch, 3, 4, "m.3", "d", 1, body, 6);
  const chunk = batch.take();
  const spans: [number, number][] = [];
  new FrameDecoder().each(chunk, (_data, start, end) => {
    spans.push([start, end]);
    return true;
  });
  expect(spans.length).toBe(3);
  const [first, second, third] = spans as [[number, number], [number, number], [number, number]];
  expect(readDeliver(chunk, ...first)).toMatchObject({ sub: 1, tag: 2, messageId: "m.1", destination: "d", created: 5 });
  expect(readSend(chunk, ...second)).toMatchObject({ ref: 7, channel: "e/v1/a", messageId: "m.2" });
  expect(readDeliver(chunk, ...third)).toMatchObject({ sub: 3, tag: 4, messageId: "m.3", nbRequeues: 1 });
  expect(decode(readSend(chunk, ...second)!.body)).toEqual({ n: 1 });
  // A frame's end is a hard limit: with it moved one byte short or long, nothing is read.
  expect(readDeliver(chunk, first[0], first[1] - 1)).toBeUndefined();
  expect(readDeliver(chunk, first[0], first[1] + 1)).toBeUndefined();
  expect(readSend(chunk, second[0], second[1] - 1)).toBeUndefined();
  expect(readSend(chunk, second[0], second[1] + 1)).toBeUndefined();
});
