/**
 * docs/configuration.md cannot drift from the config schema: every key the schema accepts has a
 * row in the reference tables, every row names a key the schema accepts, and every default written
 * there is the real one.
 *
 * Keys are written as paths: `socketServer.port`, `socketServer.tls.cert`,
 * `channels["endpoint/version"].ttl` (one per queue), `rules[].read` (one per rule). A section that
 * is always an object (`socketServer`, `admin`, `cluster`) is a heading, not a row; an object that
 * may be null (`socketServer.tls`, `cluster.etcd`) has a row of its own and one per field.
 *
 * The default column is either a JSON value in backticks, compared with the real default, or:
 * "required" (a field of an optional object that has no default), "none" (an optional field with
 * no default), or, for a `channels[…]` key, "broker's `key`", naming the broker-level key it
 * overrides.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import * as v from "valibot";
import { CONFIG_SCHEMA, defaultConfig } from "../../src/server/config/config.ts";
import { RESTART_KEY_PATHS } from "../../src/server/config/restart_keys.ts";

const DOC = join(import.meta.dir, "..", "..", "docs", "configuration.md");
const QUEUE = `["endpoint/version"]`;

interface SchemaKey {
  /** Inside a `channels` entry, a rule, or an object that may be null: the broker has no value for it. */
  nested: boolean;
  optional: boolean;
  /** The schema's own default (`v.optional(x, default)`), if any. */
  schemaDefault: unknown;
}

// deno-lint-ignore no-explicit-any
type AnySchema = any;

/** The schema behind `optional`, `nullable` and `pipe` wrappers, and what the wrappers said. */
function unwrap(schema: AnySchema): { inner: AnySchema; optional: boolean; nullable: boolean; schemaDefault: unknown } {
  let optional = false;
  let nullable = false;
  let schemaDefault: unknown = undefined;
  let inner = schema;
  for (;;) {
    if (inner.type === "optional") {
      optional = true;
      schemaDefault = v.getDefault(inner);
      inner = inner.wrapped;
    } else if (inner.type === "nullable") {
      nullable = true;
      inner = inner.wrapped;
    } else if (Array.isArray(inner.pipe)) {
      // `object()` in config.ts is pipe(custom plain-object check, the object schema).
      const structural = inner.pipe.find((step: AnySchema) =>
        step !== inner && step.kind === "schema" && ["strict_object", "object", "record", "array"].includes(step.type)
      );
      if (!structural) break;
      inner = structural;
    } else break;
  }
  return { inner, optional, nullable, schemaDefault };
}

/** Every key path the schema accepts. */
function schemaKeys(): Map<string, SchemaKey> {
  const keys = new Map<string, SchemaKey>();
  const visitObject = (entries: Record<string, AnySchema>, prefix: string, nested: boolean) => {
    for (const [name, entry] of Object.entries(entries)) {
      const path = prefix === "" ? name : `${prefix}.${name}`;
      const { inner, optional, nullable, schemaDefault } = unwrap(entry);
      const isSection = inner.type === "strict_object" && !nullable && !optional;
      if (!isSection) keys.set(path, { nested, optional, schemaDefault });
      if (inner.type === "strict_object") visitObject(inner.entries, path, nested || nullable || optional);
      if (inner.type === "record") {
        const value = unwrap(inner.value).inner;
        if (value.type === "strict_object") visitObject(value.entries, `${path}${QUEUE}`, true);
      }
      if (inner.type === "array") {
        const item = unwrap(inner.item).inner;
        if (item.type === "strict_object") visitObject(item.entries, `${path}[]`, true);
      }
    }
  };
  visitObject(unwrap(CONFIG_SCHEMA).inner.entries, "", false);
  return keys;
}

interface DocRow {
  key: string;
  default: string;
  line: number;
}

/** Rows of the reference tables: first cell one key in backticks, second cell its default. */
function documentedRows(): DocRow[] {
  const rows: DocRow[] = [];
  readFileSync(DOC, "utf8").split("\n").forEach((text, index) => {
    const match = /^\|\s*`([^`]+)`\s*\|([^|]*)\|/.exec(text);
    if (match) rows.push({ key: match[1]!, default: match[2]!.trim(), line: index + 1 });
  });
  return rows;
}

function realDefault(path: string): unknown {
  // deno-lint-ignore no-explicit-any
  let value: any = defaultConfig();
  for (const part of path.split(".")) value = value?.[part];
  return value;
}

const keys = schemaKeys();
const rows = documentedRows();

describe("docs/configuration.md", () => {
  test("the schema walk finds the keys (sanity)", () => {
    for (const known of ["serviceId", "socketServer.port", "socketServer.tls.cert", `channels${QUEUE}.ttl`, "rules[].client", "cluster.etcd.prefix"]) {
      expect(keys.has(known)).toBe(true);
    }
  });

  test("every key the schema accepts is documented", () => {
    const documented = new Set(rows.map((row) => row.key));
    expect([...keys.keys()].filter((key) => !documented.has(key))).toEqual([]);
  });

  test("every documented key exists, once", () => {
    expect(rows.filter((row) => !keys.has(row.key)).map((row) => `line ${row.line}: ${row.key}`)).toEqual([]);
    const seen = new Set<string>();
    expect(rows.filter((row) => seen.size === seen.add(row.key).size).map((row) => `line ${row.line}: ${row.key}`)).toEqual([]);
  });

  test("documented defaults are the real ones", () => {
    const wrong: string[] = [];
    for (const row of rows) {
      const key = keys.get(row.key);
      if (!key) continue;
      const say = (why: string) => wrong.push(`line ${row.line}: ${row.key}: ${why} (documented: ${row.default})`);
      const json = /^`([^`]+)`$/.exec(row.default);
      if (json) {
        let documented: unknown;
        try {
          documented = JSON.parse(json[1]!);
        } catch {
          say("the default is not a JSON value");
          continue;
        }
        const real = key.nested ? key.schemaDefault : realDefault(row.key);
        if (real === undefined) say("has no default");
        else if (!Bun.deepEquals(documented, real)) say(`the default is ${JSON.stringify(real)}`);
      } else if (row.default === "required") {
        if (!key.nested || key.optional) say("is not a required field");
      } else if (row.default === "none") {
        if (!key.optional || key.schemaDefault !== undefined) say("has a default, or is not optional");
      } else {
        const broker = /^broker's `([^`]+)`$/.exec(row.default);
        const name = row.key.split(".").at(-1);
        if (!broker || !row.key.startsWith(`channels${QUEUE}.`)) say(`write a JSON value in backticks, "required", "none" or "broker's \`key\`"`);
        else if (broker[1] !== name || !keys.has(name!)) say(`a channel key overrides the broker-level "${name}"`);
      }
    }
    expect(wrong).toEqual([]);
  });
});

test("docs/security.md names exactly the keys a reload refuses to change", () => {
  const text = readFileSync(join(import.meta.dir, "../../docs/security.md"), "utf8");
  const line = /Keys that need a restart:([\s\S]*?)\.\n/.exec(text)?.[1] ?? "";
  const named = [...line.matchAll(/`([^`]+)`/g)].map((match) => match[1]);
  expect(named.sort()).toEqual([...RESTART_KEY_PATHS].sort());
});
