import { describe, expect, it } from "bun:test";
import {
  checkAck,
  checkHello,
  checkIds,
  checkNack,
  checkPing,
  checkSend,
  checkSubscribe,
  checkUnsubscribe,
  OP,
  opOf,
  refOf,
} from "../../src/protocol/ops.ts";
import { thrown } from "../helpers/errors.ts";

const BODY = new Uint8Array([1, 2, 3]);

describe("ops", () => {
  it("OP gives every operation a distinct code", () => {
    const codes = Object.values(OP);
    expect(new Set(codes).size).toBe(codes.length);
    for (const code of codes) expect(Number.isInteger(code) && code > 0).toBe(true);
  });

  it("opOf() returns the operation code of an array", () => {
    expect(opOf([OP.SEND, 1, "e/v/1", "m", BODY])).toBe(OP.SEND);
    expect(opOf([0])).toBe(0);
    expect(opOf([999])).toBe(999);
  });

  it("opOf() throws BAD_FRAME for values that are not arrays", () => {
    for (const value of [null, undefined, 10, "10", { 0: 10 }, new Uint8Array([10]), true, new Map([[0, 10]])]) {
      expect(thrown(() => opOf(value)).code).toBe("BAD_FRAME");
    }
  });

  it("opOf() throws BAD_FRAME for an array without an integer operation code", () => {
    for (const value of [[], ["10"], [1.5], [-1], [null], [2 ** 53], [NaN], [Infinity], [[10]]]) {
      expect(thrown(() => opOf(value)).code).toBe("BAD_FRAME");
    }
  });

  it("refOf() returns an unsigned integer ref or null", () => {
    expect(refOf([OP.SEND, 7])).toBe(7);
    expect(refOf([OP.SEND, 0])).toBe(0);
    expect(refOf([OP.SEND, -1])).toBeNull();
    expect(refOf([OP.SEND, "7"])).toBeNull();
    expect(refOf([OP.SEND])).toBeNull();
  });

  it("checkHello() accepts a hello with or without a token", () => {
    const hello = [OP.HELLO, 1, { client: "svc", token: "t" }];
    expect(checkHello(hello)).toBe(hello as never);
    expect(() => checkHello([OP.HELLO, 1, { client: "svc", token: null }])).not.toThrow();
    expect(() => checkHello([OP.HELLO, 1, { client: "svc" }])).not.toThrow();
    expect(() => checkHello([OP.HELLO, 1, { client: "c".repeat(128) }])).not.toThrow();
  });

  it("checkHello() refuses a bad version or bad options with BAD_PROTOCOL", () => {
    const bad: unknown[][] = [
      [OP.HELLO],
      [OP.HELLO, "1", { client: "svc" }],
      [OP.HELLO, -1, { client: "svc" }],
      [OP.HELLO, 1.5, { client: "svc" }],
      [OP.HELLO, 1],
      [OP.HELLO, 1, null],
      [OP.HELLO, 1, "svc"],
      [OP.HELLO, 1, ["svc"]],
      [OP.HELLO, 1, {}],
      [OP.HELLO, 1, { client: 5 }],
      [OP.HELLO, 1, { client: "svc", token: 5 }],
      [OP.HELLO, 1, { client: "svc", token: {} }],
    ];
    for (const value of bad) {
      const error = thrown(() => checkHello(value));
      expect(error.code).toBe("BAD_PROTOCOL");
      expect(error.message.startsWith("Cannot read hello")).toBe(true);
    }
  });

  it("checkSend() accepts a valid send", () => {
    const send = [OP.SEND, 0, "e/v1/1", "m".repeat(128), BODY];
    expect(checkSend(send)).toBe(send as never);
    expect(() => checkSend([OP.SEND, 1, "", "m", new Uint8Array(0)])).not.toThrow();
  });

  it("checkSend() refuses each bad field with BAD_REQUEST", () => {
    const good: unknown[] = [OP.SEND, 1, "e/v1/1", "m-1", BODY];
    const fields: [number, unknown][] = [
      [1, -1],
      [1, 1.5],
      [1, "1"],
      [1, undefined],
      [2, 5],
      [2, null],
      [2, undefined],
      [3, ""],
      [3, "m".repeat(129)],
      [3, 12],
      [3, undefined],
      [4, "body"],
      [4, [1, 2, 3]],
      [4, null],
      [4, undefined],
    ];
    for (const [index, value] of fields) {
      const op = [...good];
      op[index] = value;
      const error = thrown(() => checkSend(op));
      expect(error.code).toBe("BAD_REQUEST");
      expect(error.message.startsWith("Cannot read send")).toBe(true);
    }
  });

  it("checkSubscribe() defaults a missing prefetch to null", () => {
    const op: unknown[] = [OP.CONSUME, 1, 2, "e", "v1", ["1", "*"]];
    const checked = checkSubscribe(op);
    expect(checked[6]).toBeNull();
    expect(checked.length).toBe(7);
    expect(checkSubscribe([OP.LISTEN, 1, 2, "e", "v1", [], null])[6]).toBeNull();
    expect(checkSubscribe([OP.CONSUME, 1, 2, "e", "v1", [], 1])[6]).toBe(1);
    expect(checkSubscribe([OP.CONSUME, 1, 2, "e", "v1", [], 500])[6]).toBe(500);
  });

  it("checkSubscribe() refuses prefetch 0 and other bad fields with BAD_REQUEST", () => {
    const good: unknown[] = [OP.CONSUME, 1, 2, "e", "v1", ["1"], 1];
    const fields: [number, unknown][] = [
      [6, 0],
      [6, -1],
      [6, 1.5],
      [6, "2"],
      [1, -1],
      [2, "2"],
      [2, undefined],
      [3, 1],
      [4, null],
      [5, "1"],
      [5, [1]],
      [5, ["1", null]],
      [5, new Array(10_001).fill("x")],
    ];
    for (const [index, value] of fields) {
      const op = [...good];
      op[index] = value;
      const error = thrown(() => checkSubscribe(op));
      expect(error.code).toBe("BAD_REQUEST");
      expect(error.message.startsWith("Cannot read consume")).toBe(true);
    }
    expect(thrown(() => checkSubscribe([OP.LISTEN, 1, 2, "e", "v1", ["1"], 0])).message)
      .toStartWith("Cannot read listen");
  });

  it("checkIds() accepts id lists and refuses bad fields with BAD_REQUEST", () => {
    expect(() => checkIds([OP.ADD_ID, 1, 2, ["a", "b"]])).not.toThrow();
    expect(() => checkIds([OP.REMOVE_ID, 1, 2, []])).not.toThrow();
    const bad: unknown[][] = [[OP.ADD_ID, -1, 2, []], [OP.ADD_ID, 1, "2", []], [OP.ADD_ID, 1, 2, "a"], [
      OP.ADD_ID,
      1,
      2,
      [1],
    ]];
    for (const op of bad) {
      const error = thrown(() => checkIds(op));
      expect(error.code).toBe("BAD_REQUEST");
      expect(error.message).toStartWith("Cannot read addId");
    }
    expect(thrown(() => checkIds([OP.REMOVE_ID, 1, 2, null])).message).toStartWith("Cannot read removeId");
  });

  it("checkUnsubscribe() and checkPing() refuse non-integer refs with BAD_REQUEST", () => {
    expect(() => checkUnsubscribe([OP.UNSUBSCRIBE, 1, 2])).not.toThrow();
    expect(thrown(() => checkUnsubscribe([OP.UNSUBSCRIBE, 1])).code).toBe("BAD_REQUEST");
    expect(thrown(() => checkUnsubscribe([OP.UNSUBSCRIBE, 1.5, 2])).code).toBe("BAD_REQUEST");
    expect(checkPing([OP.PING, 3])[1]).toBe(3);
    expect(thrown(() => checkPing([OP.PING])).code).toBe("BAD_REQUEST");
    expect(thrown(() => checkPing([OP.PING, "3"])).code).toBe("BAD_REQUEST");
  });

  it("checkAck() accepts a list of delivery tags", () => {
    expect(checkAck([OP.ACK, 1, [0, 1, 2 ** 40]])[2]).toEqual([0, 1, 2 ** 40]);
    expect(() => checkAck([OP.ACK, 1, []])).not.toThrow();
  });

  it("checkAck() refuses non-integer tags with BAD_REQUEST", () => {
    const bad: unknown[][] = [
      [OP.ACK, 1, [1.5]],
      [OP.ACK, 1, ["1"]],
      [OP.ACK, 1, [-1]],
      [OP.ACK, 1, [1, null]],
      [OP.ACK, 1, [NaN]],
      [OP.ACK, 1, 1],
      [OP.ACK, 1],
      [OP.ACK, 1, new Array(10_001).fill(1)],
      [OP.ACK, "1", [1]],
    ];
    for (const op of bad) {
      const error = thrown(() => checkAck(op));
      expect(error.code).toBe("BAD_REQUEST");
      expect(error.message).toStartWith("Cannot read ack");
    }
  });

  it("checkNack() accepts delays from 0 to one year", () => {
    for (const delay of [0, 1.5, 60, 31_536_000]) {
      expect(checkNack([OP.NACK, 1, 2, delay])[3]).toBe(delay);
    }
  });

  it("checkNack() refuses a negative or out-of-range delay and bad tags with BAD_REQUEST", () => {
    const bad: unknown[][] = [
      [OP.NACK, 1, 2, -1],
      [OP.NACK, 1, 2, -0.001],
      [OP.NACK, 1, 2, NaN],
      [OP.NACK, 1, 2, Infinity],
      [OP.NACK, 1, 2, 31_536_001],
      [OP.NACK, 1, 2, "5"],
      [OP.NACK, 1, 2],
      [OP.NACK, 1, 2.5, 0],
      [OP.NACK, -1, 2, 0],
    ];
    for (const op of bad) {
      const error = thrown(() => checkNack(op));
      expect(error.code).toBe("BAD_REQUEST");
      expect(error.message).toStartWith("Cannot read nack");
    }
  });
});
