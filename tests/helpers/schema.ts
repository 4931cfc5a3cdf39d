/**
 * Shared helpers of the channel schema tests (tests/server/schema*_test.ts): a descriptor checked
 * against one field `f`, and the problems of a schema the config refuses.
 */
import { expect } from "bun:test";
import { KittenError } from "../../src/protocol/errors.ts";
import { compileSchema, type Issue, type SchemaProblem } from "../../src/server/schema/schema.ts";

/** The config path schema errors name. */
export const PATH = 'channels["invoice/v1"].map';

/** The issues of `{ f: value }` against `{ f: descriptor }` (an empty list when it passes). */
export function issuesOf(descriptor: unknown[], value: unknown): Issue[] {
  const result = compileSchema({ f: descriptor }, PATH).validate({ f: value });
  return result.ok ? [] : result.issues;
}

/** Every value passes `descriptor`; a failure names the value. */
export function expectAccepts(descriptor: unknown[], values: unknown[]): void {
  const schema = compileSchema({ f: descriptor }, PATH);
  for (const value of values) {
    const result = schema.validate({ f: value });
    expect({ value, issues: result.ok ? [] : result.issues }).toEqual({ value, issues: [] });
  }
}

/** Every value is refused with exactly one issue on `f` carrying `error`. */
export function expectRefuses(descriptor: unknown[], values: unknown[], error: string): void {
  const schema = compileSchema({ f: descriptor }, PATH);
  for (const value of values) {
    const result = schema.validate({ f: value });
    const expected: Issue = value === undefined ? { field: "f", index: null, error } : { field: "f", index: null, value, error };
    expect({ value, issues: result.ok ? [] : result.issues }).toEqual({ value, issues: [expected] });
  }
}

/** The problems of a CONFIG_INVALID thrown by compileSchema(map). */
export function configProblems(map: unknown): SchemaProblem[] {
  try {
    compileSchema(map, PATH);
  } catch (error) {
    expect(error).toBeInstanceOf(KittenError);
    expect((error as KittenError).code).toBe("CONFIG_INVALID");
    return (error as KittenError).details as SchemaProblem[];
  }
  throw new Error("expected a CONFIG_INVALID error, got none");
}

/** What compileSchema(map) makes of `value` (it must pass). */
export function convert(map: unknown, value: unknown): unknown {
  const result = compileSchema(map, PATH).validate(value);
  if (!result.ok) throw new Error(`unexpected issues: ${JSON.stringify(result.issues)}`);
  return result.value;
}
