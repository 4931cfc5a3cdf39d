import { describe, expect, it } from "bun:test";
import { type ErrorCode, ERRORS, isErrorCode, isFatal, KittenError } from "../../src/protocol/errors.ts";

const CODES = Object.keys(ERRORS) as ErrorCode[];

describe("errors", () => {
  it("ERRORS gives every code a numeric HTTP status and a boolean fatal", () => {
    expect(CODES.length).toBeGreaterThan(0);
    for (const code of CODES) {
      const entry = ERRORS[code];
      expect(typeof entry.status).toBe("number");
      expect(Number.isInteger(entry.status)).toBe(true);
      expect(entry.status).toBeGreaterThanOrEqual(400);
      expect(entry.status).toBeLessThan(600);
      expect(typeof entry.fatal).toBe("boolean");
      expect(code).toMatch(/^[A-Z][A-Z_]*[A-Z]$/);
    }
  });

  it("ERRORS marks framing, protocol and auth failures fatal and request errors not", () => {
    for (const code of ["BAD_FRAME", "FRAME_TOO_LARGE", "BAD_PROTOCOL", "AUTH_FAILED"] as const) {
      expect(ERRORS[code].fatal).toBe(true);
    }
    for (const code of ["BAD_REQUEST", "BAD_CHANNEL", "NOT_ALLOWED", "UNKNOWN_OP", "INTERNAL"] as const) {
      expect(ERRORS[code].fatal).toBe(false);
    }
    expect(ERRORS.FRAME_TOO_LARGE.status).toBe(413);
    expect(ERRORS.NOT_ALLOWED.status).toBe(403);
  });

  it("KittenError carries code, message and details", () => {
    const details = [{ path: "a.b", message: "must be a number" }];
    const error = new KittenError("BAD_FORMAT", 'Cannot send to "e/v/1": bad body', details);
    expect(error.code).toBe("BAD_FORMAT");
    expect(error.message).toBe('Cannot send to "e/v/1": bad body');
    expect(error.details).toBe(details);
  });

  it("KittenError leaves details undefined when none are given", () => {
    const error = new KittenError("INTERNAL", "boom");
    expect(error.details).toBeUndefined();
    expect(error.code).toBe("INTERNAL");
  });

  it('KittenError is an Error named "KittenError" with a stack and a cause', () => {
    const cause = new Error("disk");
    const error = new KittenError("STORE_UNAVAILABLE", "Cannot write", undefined, { cause });
    expect(error).toBeInstanceOf(Error);
    expect(error).toBeInstanceOf(KittenError);
    expect(error.name).toBe("KittenError");
    expect(error.cause).toBe(cause);
    expect(typeof error.stack).toBe("string");
    expect(String(error)).toBe("KittenError: Cannot write");
  });

  it("isErrorCode() is true for every catalogue code", () => {
    for (const code of CODES) expect(isErrorCode(code)).toBe(true);
  });

  it("isErrorCode() is false for other strings, inherited keys and non-strings", () => {
    const others: unknown[] = [
      "bad_frame",
      "BAD FRAME",
      "",
      "toString",
      "constructor",
      "hasOwnProperty",
      "__proto__",
      "valueOf",
      1,
      400,
      null,
      undefined,
      {},
      ["BAD_FRAME"],
      new String("BAD_FRAME"),
    ];
    for (const value of others) expect(isErrorCode(value)).toBe(false);
  });

  it("isFatal() follows the catalogue for every code", () => {
    for (const code of CODES) expect(isFatal(code)).toBe(ERRORS[code].fatal);
    expect(isFatal("BAD_FRAME")).toBe(true);
    expect(isFatal("BAD_REQUEST")).toBe(false);
  });
});
