/**
 * Channel schemas the config refuses (CONFIG_INVALID, every problem named), and compileSchemas().
 */
import { describe, expect, it } from "bun:test";
import { KittenError } from "../../src/protocol/errors.ts";
import { compileSchema, compileSchemas, type SchemaProblem } from "../../src/server/schema/schema.ts";
import { configProblems, PATH } from "../helpers/schema.ts";

describe("schema config errors (CONFIG_INVALID)", () => {
  it("refuses an unknown type name with the field's path (the original accepted anything)", () => {
    const problems = configProblems({ total: ["foo"] });
    expect(problems).toHaveLength(1);
    expect(problems[0]!.path).toBe('channels["invoice/v1"].map.total');
    expect(problems[0]!.message).toStartWith('unknown type "foo"');
  });

  it("refuses a descriptor value that is not an array, with a hint", () => {
    const problems = configProblems({ a: "int", b: { c: ["int"] }, c: 5, d: "foo" });
    expect(problems).toEqual([
      { path: `${PATH}.a`, message: 'must be an array: write ["int"] instead of "int"' },
      { path: `${PATH}.b`, message: 'must be an array: write ["object", {…}] for a nested object' },
      { path: `${PATH}.c`, message: 'must be an array such as ["string"] (got 5)' },
      { path: `${PATH}.d`, message: 'must be an array such as ["string"] (got the string "foo")' },
    ]);
  });

  it("refuses an unknown parameter after the type, and stray non-string elements", () => {
    expect(configProblems({ a: ["int", "mni", 3] }).map((p) => p.message)).toEqual([
      'unknown parameter "mni" (known parameters: min, max, optional, toBoolean, toInt, toNumber)',
      'unexpected element 2, 3: expected a type, a parameter or a nested descriptor',
    ]);
    expect(configProblems({ a: ["int", null] })[0]!.message).toBe("unexpected element 1, null: expected a type, a parameter or a nested descriptor");
  });

  it("refuses bad min/max values", () => {
    const problems = configProblems({
      a: ["int", "min"],
      b: ["int", "max", "5"],
      c: ["int", "min", 5, "max", 3],
      d: ["string", "min", -1],
      e: ["array", "max", 1.5],
      f: ["int", "min", 1, "min", 2],
      g: ["number", "max", Number.NaN],
    });
    expect(problems).toEqual([
      { path: `${PATH}.a`, message: '"min" must be followed by a finite number (got nothing)' },
      { path: `${PATH}.b`, message: '"max" must be followed by a finite number (got "5")' },
      { path: `${PATH}.c`, message: '"min" (5) is greater than "max" (3)' },
      { path: `${PATH}.d`, message: '"min" must be a whole number >= 0 for type "string", whose length it bounds (got -1)' },
      { path: `${PATH}.e`, message: '"max" must be a whole number >= 0 for type "array", whose length it bounds (got 1.5)' },
      { path: `${PATH}.f`, message: '"min" is given twice' },
      { path: `${PATH}.g`, message: '"max" must be followed by a finite number (got NaN)' },
    ]);
  });

  it("refuses min/max on types they do not apply to (the original ignored them)", () => {
    for (const type of ["binary", "boolean", "object", "email", "emailList", "notNull"]) {
      expect(configProblems({ a: [type, "min", 1] })[0]!.message).toStartWith(`"min" does not apply to type "${type}"`);
    }
  });

  it("refuses converters on the wrong type, and two converters", () => {
    expect(configProblems({ a: ["int", "toInt"] })[0]!.message).toBe('"toInt" applies only to type "numeric", not "int"');
    expect(configProblems({ a: ["string", "toBoolean"] })[0]!.message).toBe('"toBoolean" applies only to type "binary", not "string"');
    expect(configProblems({ a: ["numeric", "toNumber"] })[0]!.message).toBe('"toNumber" applies only to type "decimal", not "numeric"');
    expect(configProblems({ a: ["numeric", "toInt", "toNumber"] }).map((p) => p.message)).toContain(
      'has two converters, "toInt" and "toNumber": keep one',
    );
  });

  it("refuses two types, no type, and optional with notNull", () => {
    expect(configProblems({ a: ["int", "string"] })[0]!.message).toBe('has two types, "int" and "string": keep one');
    expect(configProblems({ a: ["<<int>>", "string"] })[0]!.message).toBe('has two types, "int" and "string": keep one');
    expect(configProblems({ a: [] })[0]!.message).toStartWith("has no type");
    expect(configProblems({ a: ["optional"] })[0]!.message).toStartWith("has no type");
    expect(configProblems({ a: ["notNull", "optional"] })[0]!.message).toBe('"optional" contradicts type "notNull", which refuses null and undefined');
  });

  it("refuses misplaced nested descriptors and Lunaris function options", () => {
    expect(configProblems({ a: ["string", { b: ["int"] }] })[0]!.message).toBe('a nested descriptor is allowed only with type "object" or "array", not "string"');
    expect(configProblems({ a: ["object", { b: ["int"] }, "optional"] })[0]!.message).toBe("the nested descriptor (element 1) must be the last element");
    expect(configProblems({ a: ["string", "onTransform", "x"] })[0]!.message).toStartWith('"onTransform" is not supported');
    expect(configProblems({ a: ["string", "onValidate"] })[0]!.message).toStartWith('"onValidate" is not supported');
  });

  it("gives nested problems their full path", () => {
    const problems = configProblems({
      items: ["array", "min", 1, { price: ["decimal", "max"], "unit name": ["strin"] }],
      info: ["object", { deep: ["object", { x: "int" }] }],
    });
    expect(problems.map((p) => p.path)).toEqual([
      `${PATH}.items[3].price`,
      `${PATH}.items[3]["unit name"]`,
      `${PATH}.info[1].deep[1].x`,
    ]);
    expect(configProblems([{ id: ["foo"] }])[0]!.path).toBe(`${PATH}[0].id`);
  });

  it("refuses field names every JavaScript object inherits", () => {
    const problems = configProblems(JSON.parse('{"constructor": ["int"], "__proto__": ["int"], "toString": ["string"]}'));
    expect(problems.map((p) => p.path)).toEqual([`${PATH}.constructor`, `${PATH}.__proto__`, `${PATH}.toString`]);
  });

  it("refuses a root that is neither an object nor an array of one object", () => {
    for (const map of ["int", 5, [], [{}, {}], [["int"]], true]) {
      const problems = configProblems(map);
      expect(problems).toHaveLength(1);
      expect(problems[0]!.path).toBe(PATH);
      expect(problems[0]!.message).toStartWith("must be an object of field descriptors");
    }
  });

  it("lists every problem in one error, its message naming each path", () => {
    try {
      compileSchema({ a: ["foo"], b: "int", c: ["array", { d: ["bar"] }] }, PATH);
      throw new Error("expected CONFIG_INVALID");
    } catch (error) {
      const kittenError = error as KittenError;
      expect(kittenError.code).toBe("CONFIG_INVALID");
      expect((kittenError.details as SchemaProblem[]).map((p) => p.path)).toEqual([`${PATH}.a`, `${PATH}.b`, `${PATH}.c[1].d`]);
      expect(kittenError.message).toStartWith("Cannot compile channel format: 3 problems: ");
      for (const path of [`${PATH}.a:`, `${PATH}.b:`, `${PATH}.c[1].d:`]) expect(kittenError.message).toContain(path);
    }
  });
});

describe("compileSchemas", () => {
  it("compiles the good maps and collects the problems of every channel", () => {
    const { schemas, problems } = compileSchemas({
      "invoice/v1": { map: { total: ["number", "min", 0] } },
      "invoice/v2": { map: { total: ["money"] } },
      "order/v1": { map: [{ id: "int" }] },
      "plain/v1": {},
      "reset/v1": { map: null },
    });
    expect([...schemas.keys()]).toEqual(["invoice/v1"]);
    expect(schemas.get("invoice/v1")!.validate({ total: -1 })).toEqual({
      ok: false,
      issues: [{ field: "total", index: null, value: -1, error: "must be a number greater than or equal to 0" }],
    });
    expect(problems.map((p) => p.path)).toEqual(['channels["invoice/v2"].map.total', 'channels["order/v1"].map[0].id']);
  });

  it("returns nothing for channels without maps", () => {
    expect(compileSchemas({})).toEqual({ schemas: new Map(), problems: [] });
    expect(compileSchemas({ "a/v1": { prefetch: 3 } as { map?: unknown } }).schemas.size).toBe(0);
  });
});
