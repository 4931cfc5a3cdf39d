/**
 * Channel formats: compiles a `channels["endpoint/version"].map` descriptor (the descriptor
 * language of kitten-mq 0.12, so its config files keep working) into a valibot schema once, when
 * the config loads, and validates message bodies against it. The type table lives in `types.ts`.
 *
 * Descriptor: `{ attr: [type, ...params, {nested}?] }`, or `[ {…} ]` for an array of objects.
 * Params: `'min', n` / `'max', n` (inclusive; numbers, parseInt, parseFloat or length depending on
 * the type), `'optional'` (also accepts null, undefined and ''), and the converters `toBoolean`
 * (binary), `toInt` (numeric), `toNumber` (decimal). The type and params may come in any order;
 * a nested descriptor comes last. Only declared attributes are checked; others pass through.
 *
 * Every mistake in a descriptor is a CONFIG_INVALID problem (unknown type or parameter, a value
 * that is not an array, bounds or converters on a type they do not apply to, two types, …), so a
 * bad format is found when the config loads, not by a sender. `optional` never cancels
 * `min`/`max`, wherever it is written; converters only touch present values and are applied to a
 * copy, never to the sender's object; a root of the wrong type gives one issue.
 *
 * Lunaris leftovers: `'<col>'` and `'<<col>>'` SQL annotations are accepted and ignored, except
 * `'<<type>>'` naming a type (`'<<int>>'`), which declares that type (as 0.12 did outside root
 * arrays; descriptors written for it rely on it). A descriptor made only of annotations
 * (`['<id>']`) declares the field unchecked.
 * `'onValidate'`/`'onTransform'` are refused: they need functions, which JSON cannot hold.
 *
 * Config problem paths are real paths into the config document: `channels["invoice/v1"].map.total`,
 * `….map.items[1].price` (the nested descriptor is element 1 of `["array", {…}]`), `….map[0].id`
 * for a root array. The message says which element of the descriptor is wrong.
 *
 * Issue fields keep 0.12's shape, so code that reads them keeps working: `attr`, `parent[child]`,
 * `items[3][price]` for an array of objects (the first array written with its index),
 * `a[b][][c]` deeper; `index` is the index in the innermost array, also under a nested object,
 * or null. A root array adds no
 * name: `id` with `index` 2. An element that is not an object is `items[3]` (`[2]` at the root);
 * the root itself is `""`. `value` is omitted when undefined (a missing attribute). Nested fields
 * are checked only when their parent passed its own check (type and bounds): one issue per bad
 * parent, not one per field beneath it.
 */
import * as v from "valibot";
import { KittenError } from "../../protocol/errors.ts";
import {
  CONVERTERS,
  type ConverterName,
  fieldCheck,
  fieldMessage,
  isAbsent,
  TYPE_NAMES,
  type TypeName,
  TYPES,
} from "./types.ts";
import { isPlainObject, show } from "../internal/values.ts";

/** One reason a message does not match its channel's format, in the shape 0.12 clients read. */
export interface Issue {
  field: string;
  index: number | null;
  value?: unknown;
  error: string;
}

export type ValidateResult = { ok: true; value: unknown } | { ok: false; issues: Issue[] };

export interface CompiledSchema {
  /**
   * Checks `value` and returns every issue, or the value consumers receive: a copy with the
   * converters applied, or `value` itself when the map has no converter. Never throws.
   */
  validate(value: unknown): ValidateResult;
}

/** One descriptor mistake; same shape as the config loader's problems. */
export interface SchemaProblem {
  path: string;
  message: string;
}

type Schema = v.GenericSchema;
type Convert = (value: unknown) => unknown;
type ObjectIssue = v.LooseObjectIssue;

const PARAMS = ["min", "max", "optional", "toBoolean", "toInt", "toNumber"] as const;
const ANNOTATION_RE = /^\s*(<{1,2})\s*(\w+)\s*(>{1,2})\s*$/;
const ANY = v.any();
// Pinned so that a global `v.setGlobalConfig({ abortEarly })` elsewhere cannot hide issues.
const PARSE_CONFIG = { abortEarly: false, abortPipeEarly: false } as const;

const isTypeName = (item: string): item is TypeName => (TYPE_NAMES as readonly string[]).includes(item);
const isKeyword = (item: unknown) =>
  typeof item === "string" &&
  (isTypeName(item) || (PARAMS as readonly string[]).includes(item) || ANNOTATION_RE.test(item));

/**
 * Compiles one `map` descriptor. `path` prefixes the problem paths, e.g. `channels["invoice/v1"].map`.
 * Throws a CONFIG_INVALID `KittenError` whose `details` lists every problem.
 */
export function compileSchema(map: unknown, path: string): CompiledSchema {
  const problems: SchemaProblem[] = [];
  const schema = compileRoot(map, path, problems);
  if (problems.length > 0 || schema === undefined) {
    const count = `${problems.length} problem${problems.length === 1 ? "" : "s"}`;
    const list = problems.map((problem) => `${problem.path}: ${problem.message}`).join("; ");
    throw new KittenError("CONFIG_INVALID", `Cannot compile channel format: ${count}: ${list}`, problems);
  }
  return schema;
}

/**
 * Compiles the `map` of every channel that has one (a null or missing `map` means no format).
 * Returns the schemas by `endpoint/version` and every problem, for the config loader to merge.
 */
export function compileSchemas(
  channels: Record<string, { map?: unknown }>,
): { schemas: Map<string, CompiledSchema>; problems: SchemaProblem[] } {
  const schemas = new Map<string, CompiledSchema>();
  const problems: SchemaProblem[] = [];
  for (const [queue, channel] of Object.entries(channels)) {
    if (!isPlainObject(channel) || channel.map === undefined || channel.map === null) continue;
    const before = problems.length;
    const schema = compileRoot(channel.map, `channels[${JSON.stringify(queue)}].map`, problems);
    if (schema !== undefined && problems.length === before) schemas.set(queue, schema);
  }
  return { schemas, problems };
}

// ---------------------------------------------------------------------------------------------
// Compilation

function compileRoot(map: unknown, path: string, problems: SchemaProblem[]): CompiledSchema | undefined {
  let schema: Schema;
  let convert: Convert | undefined;
  if (isPlainObject(map)) {
    const body = compileObject(map, path, problems);
    schema = v.pipe(v.custom(isPlainObject, TYPES.object.message), body.schema);
    convert = body.convert;
  } else if (Array.isArray(map) && map.length === 1 && isPlainObject(map[0])) {
    const body = compileObject(map[0], `${path}[0]`, problems);
    schema = v.pipe(v.custom(Array.isArray, TYPES.array.message), v.array(element(body.schema)));
    convert = body.convert && convertArray(body.convert);
  } else {
    problems.push({
      path,
      message: `must be an object of field descriptors, or an array holding one such object (got ${show(map)})`,
    });
    return undefined;
  }
  return { validate: (value) => validate(schema, convert, value) };
}

/** The valibot entries of one descriptor object, and the converter of its fields (if any). */
function compileObject(
  descriptor: Record<string, unknown>,
  path: string,
  problems: SchemaProblem[],
): { schema: Schema; convert: Convert | undefined } {
  const entries: Record<string, Schema> = {};
  const messages = new Map<string, string>();
  const converters: [string, Convert][] = [];
  for (const [key, value] of Object.entries(descriptor)) {
    const fieldPath = childPath(path, key);
    if (key in Object.prototype) {
      // Every object inherits these, so valibot would check the inherited function when absent.
      problems.push({ path: fieldPath, message: `"${key}" cannot be a field name: every JavaScript object has it` });
      continue;
    }
    const field = compileField(value, fieldPath, problems);
    if (field === undefined) continue;
    entries[key] = field.schema;
    messages.set(key, field.message);
    if (field.convert) converters.push([key, field.convert]);
  }
  // A missing required attribute is a "key" issue of the object: report it with the field's message.
  const message = (issue: ObjectIssue) => messages.get(String(issue.path?.[0]?.key)) ?? issue.message;
  const schema = v.looseObject(entries, message);
  return { schema, convert: converters.length > 0 ? convertObject(converters) : undefined };
}

interface Field {
  schema: Schema;
  message: string;
  convert: Convert | undefined;
}

/** One attribute's descriptor, `[type, ...params, {nested}?]`; undefined when invalid or unchecked. */
function compileField(descriptor: unknown, path: string, problems: SchemaProblem[]): Field | undefined {
  if (!Array.isArray(descriptor)) {
    problems.push({ path, message: notAnArray(descriptor) });
    return undefined;
  }
  const before = problems.length;
  const problem = (message: string) => problems.push({ path, message });
  let type: TypeName | undefined;
  let min: number | undefined;
  let max: number | undefined;
  let optional = false;
  let converter: ConverterName | undefined;
  let nested: Record<string, unknown> | undefined;
  let nestedIndex = 0;
  let annotations = 0;
  const setType = (name: TypeName) => {
    if (type !== undefined && type !== name) problem(`has two types, "${type}" and "${name}": keep one`);
    else type = name;
  };

  for (let i = 0; i < descriptor.length; i++) {
    const item: unknown = descriptor[i];
    if (isPlainObject(item)) {
      if (i === descriptor.length - 1) [nested, nestedIndex] = [item, i];
      else problem(`the nested descriptor (element ${i}) must be the last element`);
    } else if (typeof item !== "string") {
      problem(`unexpected element ${i}, ${show(item)}: expected a type, a parameter or a nested descriptor`);
    } else if (isTypeName(item)) {
      setType(item);
    } else if (ANNOTATION_RE.test(item)) {
      annotations++;
      const [, open, name, close] = ANNOTATION_RE.exec(item)!;
      if (open === "<<" && close === ">>" && isTypeName(name!)) setType(name);
    } else if (item === "min" || item === "max") {
      const next: unknown = descriptor[i + 1];
      if (typeof next === "number" && Number.isFinite(next)) {
        if ((item === "min" ? min : max) !== undefined) problem(`"${item}" is given twice`);
        if (item === "min") min = next;
        else max = next;
        i++;
      } else {
        problem(`"${item}" must be followed by a finite number (got ${next === undefined ? "nothing" : show(next)})`);
        if (next !== undefined && !isKeyword(next) && !isPlainObject(next)) i++;
      }
    } else if (item === "optional") {
      if (optional) problem(`"optional" is given twice`);
      optional = true;
    } else if (item === "toBoolean" || item === "toInt" || item === "toNumber") {
      if (converter !== undefined) problem(`has two converters, "${converter}" and "${item}": keep one`);
      converter = item;
    } else if (item === "onValidate" || item === "onTransform") {
      problem(`"${item}" is not supported: it is a Lunaris option that needs a function`);
      i++; // its argument
    } else if (type === undefined) {
      problem(`unknown type "${item}" (known types: ${TYPE_NAMES.join(", ")})`);
    } else {
      problem(`unknown parameter "${item}" (known parameters: ${PARAMS.join(", ")})`);
    }
  }

  if (type === undefined) {
    if (annotations > 0 && annotations === descriptor.length) return undefined; // unchecked, like ['<id>']
    if (problems.length === before) problem(`has no type (known types: ${TYPE_NAMES.join(", ")})`);
    if (nested) compileObject(nested, `${path}[${nestedIndex}]`, problems); // report its problems too
    return undefined;
  }
  checkParams(type, min, max, optional, converter, problem);
  let body: { schema: Schema; convert: Convert | undefined } | undefined;
  if (nested) {
    if (type !== "object" && type !== "array") {
      problem(`a nested descriptor is allowed only with type "object" or "array", not "${type}"`);
    }
    body = compileObject(nested, `${path}[${nestedIndex}]`, problems);
  }
  if (problems.length > before) return undefined;

  const message = fieldMessage(type, min, max);
  let schema: Schema;
  let convert: Convert | undefined;
  if (body) {
    const own = v.custom(fieldCheck(type, min, max, false), message);
    const core = type === "object"
      ? v.pipe(own, body.schema)
      : v.pipe(own, v.array(element(body.schema)));
    schema = optional ? v.lazy((x) => (isAbsent(x) ? ANY : core)) : core;
    convert = body.convert && (type === "object" ? body.convert : convertArray(body.convert));
  } else {
    schema = v.custom(fieldCheck(type, min, max, optional), message);
    if (converter) {
      const conversion = CONVERTERS[converter].convert;
      convert = (x) => (isAbsent(x) ? x : conversion(x));
    }
  }
  // `v.optional` lets the attribute be missing: the object then skips it instead of a key issue.
  return { schema: optional ? v.optional(schema) : schema, message, convert };
}

function checkParams(
  type: TypeName,
  min: number | undefined,
  max: number | undefined,
  optional: boolean,
  converter: ConverterName | undefined,
  problem: (message: string) => void,
): void {
  const bound = TYPES[type].bound;
  for (const [name, limit] of [["min", min], ["max", max]] as const) {
    if (limit === undefined) continue;
    if (bound === null) {
      const types = "int, number, numeric, decimal, string, alpha, alphanumeric and array";
      problem(`"${name}" does not apply to type "${type}" (only to ${types})`);
    } else if (bound === "length" && (!Number.isInteger(limit) || limit < 0)) {
      problem(`"${name}" must be a whole number >= 0 for type "${type}", whose length it bounds (got ${limit})`);
    }
  }
  if (min !== undefined && max !== undefined && min > max) problem(`"min" (${min}) is greater than "max" (${max})`);
  if (converter !== undefined && CONVERTERS[converter].type !== type) {
    problem(`"${converter}" applies only to type "${CONVERTERS[converter].type}", not "${type}"`);
  }
  if (optional && type === "notNull") {
    problem(`"optional" contradicts type "notNull", which refuses null and undefined`);
  }
}

/** An element of an array of objects: a plain object, then its declared attributes. */
function element(body: Schema): Schema {
  return v.pipe(v.custom(isPlainObject, TYPES.object.message), body);
}

function convertObject(converters: [string, Convert][]): Convert {
  return (value) => {
    if (!isPlainObject(value)) return value;
    const copy: Record<string, unknown> = { ...value };
    for (const [key, convert] of converters) {
      if (Object.hasOwn(value, key)) copy[key] = convert(value[key]);
    }
    return copy;
  };
}

function convertArray(convert: Convert): Convert {
  return (value) => (Array.isArray(value) ? value.map(convert) : value);
}

// ---------------------------------------------------------------------------------------------
// Validation

function validate(schema: Schema, convert: Convert | undefined, value: unknown): ValidateResult {
  if (value === null || value === undefined) {
    return { ok: false, issues: [{ field: "", index: null, error: "No value" }] };
  }
  try {
    const result = v.safeParse(schema, value, PARSE_CONFIG);
    if (result.success) return { ok: true, value: convert ? convert(value) : value };
    return { ok: false, issues: result.issues.map(toIssue) };
  } catch {
    // Not expected: the checks are total functions. Kept so that a bug refuses one message only.
    return { ok: false, issues: [{ field: "", index: null, error: "could not be validated" }] };
  }
}

/** valibot's issue (with its `path`) written as `{field, index, value, error}` (0.12's shape). */
function toIssue(issue: v.BaseIssue<unknown>): Issue {
  let field = "";
  let index: number | null = null;
  let names = 0;
  let indexWritten = false;
  const path = issue.path ?? [];
  for (let i = 0; i < path.length; i++) {
    const item = path[i]!;
    if (item.type === "array") {
      index = item.key as number;
      if (names === 0) {
        if (i === path.length - 1) field = `[${index}]`; // an element of a root array
      } else if (names === 1 && !indexWritten) {
        field += `[${index}]`;
        indexWritten = true;
      } else {
        field += "[]";
      }
    } else {
      const key = String(item.key);
      field = names === 0 ? key : `${field}[${key}]`;
      names++;
    }
  }
  const out: Issue = { field, index, error: issue.message };
  if (issue.input !== undefined) out.value = issue.input;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Config messages

/** `map.total`, `map["unit price"]`: the same writing as the config loader's paths. */
function childPath(path: string, key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

function notAnArray(value: unknown): string {
  if (typeof value === "string") {
    return isTypeName(value)
      ? `must be an array: write ["${value}"] instead of "${value}"`
      : `must be an array such as ["string"] (got the string ${show(value)})`;
  }
  if (isPlainObject(value)) return `must be an array: write ["object", {…}] for a nested object`;
  return `must be an array such as ["string"] (got ${show(value)})`;
}

