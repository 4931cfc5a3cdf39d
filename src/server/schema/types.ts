/**
 * The type table of the channel `map` language: one row per type name with its test, its error
 * message, how `min`/`max` measure it, and the converters.
 *
 * - Regex types test strings only: a regex run on a stringified value would let `[5]` pass
 *   `numeric` and `[1]` pass `binary`.
 * - `number` and `decimal` refuse NaN, Infinity and -Infinity (CBOR can carry them, JSON cannot).
 * - `email` is anchored at the end, so `"a@b.fr, then anything"` fails. Its top-level domain part
 *   is written `[a-zA-Z]{2,125}`, the same strings as `([a-zA-Z]{2,5}){1,25}` without the
 *   exponential backtracking of the nested quantifier.
 * - Messages are plain English sentences, with no placeholders left to fill.
 */
import { isPlainObject } from "../internal/values.ts";

export const TYPE_NAMES = [
  "alpha",
  "alphanumeric",
  "array",
  "binary",
  "boolean",
  "decimal",
  "int",
  "number",
  "numeric",
  "object",
  "string",
  "email",
  "emailList",
  "notNull",
] as const;
export type TypeName = (typeof TYPE_NAMES)[number];

/**
 * How `min`/`max` measure a value that passed the type test: the number itself, `parseInt`,
 * `parseFloat`, or `.length`. `null`: the type takes no bounds (a config error).
 */
export type Bound = "value" | "parseInt" | "parseFloat" | "length" | null;

export interface TypeRule {
  test(value: unknown): boolean;
  message: string;
  bound: Bound;
}

const ALPHA_RE = /^[a-zA-Z]+$/;
const ALPHANUMERIC_RE = /^[0-9a-zA-Z]+$/;
const DECIMAL_RE = /^-?[0-9]+(\.[0-9]+)?$/;
const NUMERIC_RE = /^-?[0-9]+$/;
const EMAIL = "[a-zA-Z0-9_\\-.]+@[a-zA-Z0-9_\\-.]+\\.[a-zA-Z]{2,125}";
const EMAIL_RE = new RegExp(`^${EMAIL}$`);
const EMAIL_LIST_RE = new RegExp(`^${EMAIL}(?:[\\n ]*;[\\n ]*${EMAIL})*$`);


/** What `optional` accepts in place of a value: null, undefined and the empty string. */
export function isAbsent(value: unknown): boolean {
  return value === null || value === undefined || value === "";
}

const isString = (value: unknown): value is string => typeof value === "string";
const isFiniteNumber = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value);

export const TYPES: Record<TypeName, TypeRule> = {
  alpha: {
    test: (x) => isString(x) && ALPHA_RE.test(x),
    message: "must contain only letters",
    bound: "length",
  },
  alphanumeric: {
    test: (x) => isString(x) && ALPHANUMERIC_RE.test(x),
    message: "must contain only letters and numbers",
    bound: "length",
  },
  array: { test: Array.isArray, message: "must be an array", bound: "length" },
  binary: {
    test: (x) =>
      x === true || x === false || x === 0 || x === 1 || x === "0" || x === "1" || x === "true" || x === "false",
    message: "must be a binary value (true, false, 0 or 1)",
    bound: null,
  },
  boolean: { test: (x) => typeof x === "boolean", message: "must be a boolean", bound: null },
  decimal: {
    test: (x) => isFiniteNumber(x) || (isString(x) && DECIMAL_RE.test(x)),
    message: "must be a decimal",
    bound: "parseFloat",
  },
  int: { test: Number.isInteger, message: "must be an integer", bound: "value" },
  number: { test: isFiniteNumber, message: "must be a number", bound: "value" },
  numeric: {
    // A number passes when its decimal writing is digits only, as a numeric string does.
    test: (x) => (Number.isInteger(x) && Math.abs(x as number) < 1e21) || (isString(x) && NUMERIC_RE.test(x)),
    message: "must be a numeric value",
    bound: "parseInt",
  },
  object: { test: isPlainObject, message: "must be an object", bound: null },
  string: { test: isString, message: "must be a string", bound: "length" },
  email: { test: (x) => isString(x) && EMAIL_RE.test(x), message: "must be a valid email", bound: null },
  emailList: {
    test: (x) => isString(x) && EMAIL_LIST_RE.test(x),
    message: "must be a valid email list (emails separated by ;)",
    bound: null,
  },
  notNull: { test: (x) => x !== null && x !== undefined, message: "must be defined", bound: null },
};

/** `min`/`max` measures, applied only to values that passed their type test. */
export const MEASURES: Record<Exclude<Bound, null>, (value: unknown) => number> = {
  value: (x) => x as number,
  parseInt: (x) => (typeof x === "number" ? x : Number.parseInt(x as string, 10)),
  parseFloat: (x) => (typeof x === "number" ? x : Number.parseFloat(x as string)),
  length: (x) => (x as string | unknown[]).length,
};

export type ConverterName = "toBoolean" | "toInt" | "toNumber";

/** Converters: the one type each applies to, and the conversion of a present, valid value. */
export const CONVERTERS: Record<ConverterName, { type: TypeName; convert: (value: unknown) => unknown }> = {
  toBoolean: { type: "binary", convert: (x) => x === true || x === "true" || x === "1" || x === 1 },
  toInt: { type: "numeric", convert: MEASURES.parseInt },
  toNumber: { type: "decimal", convert: MEASURES.parseFloat },
};

/** The full message of one field: the type's message, then its bounds. */
export function fieldMessage(type: TypeName, min: number | undefined, max: number | undefined): string {
  const rule = TYPES[type];
  if (min === undefined && max === undefined) return rule.message;
  if (rule.bound === "length") {
    if (max === undefined) return `${rule.message} and have a length of at least ${min}`;
    if (min === undefined) return `${rule.message} and have a length of at most ${max}`;
    return `${rule.message} and have a length between ${min} and ${max} inclusive`;
  }
  if (max === undefined) return `${rule.message} greater than or equal to ${min}`;
  if (min === undefined) return `${rule.message} less than or equal to ${max}`;
  return `${rule.message} between ${min} and ${max} inclusive`;
}

/** The check of one field: type, then bounds; `optional` accepts absent values whatever the bounds. */
export function fieldCheck(
  type: TypeName,
  min: number | undefined,
  max: number | undefined,
  optional: boolean,
): (value: unknown) => boolean {
  const { test, bound } = TYPES[type];
  let check = test;
  if (bound !== null && (min !== undefined || max !== undefined)) {
    const measure = MEASURES[bound];
    const lo = min ?? -Infinity;
    const hi = max ?? Infinity;
    check = (x) => {
      if (!test(x)) return false;
      const n = measure(x);
      return n >= lo && n <= hi;
    };
  }
  if (!optional) return check;
  const present = check;
  return (x) => isAbsent(x) || present(x);
}
