/**
 * Channel schemas: nested paths, roots other than an object, and the leftovers of the reference
 * (Lunaris) it accepts or refuses.
 */
import { describe, expect, it } from "bun:test";
import { compileSchema } from "../../src/server/schema/schema.ts";
import { expectAccepts, expectRefuses, PATH } from "../helpers/schema.ts";

describe("schema nested paths", () => {
  const map = {
    id: ["int"],
    info: ["object", { temperature: ["string"] }],
    countries: ["array", {
      name: ["string"],
      info: ["object", "optional", { t: ["int"] }],
      cities: ["array", "optional", { id: ["int"] }],
    }],
    a: ["object", { b: ["array", { c: ["int"] }] }],
  };
  const good = { id: 1, info: { temperature: "5degree" }, countries: [], a: { b: [] } };

  it("names a nested object attribute parent[child]", () => {
    const result = compileSchema(map, PATH).validate({ ...good, info: { temperature: 5 } });
    expect(result).toEqual({ ok: false, issues: [{ field: "info[temperature]", index: null, value: 5, error: "must be a string" }] });
  });

  it("reports only the parent when it has the wrong type", () => {
    const result = compileSchema(map, PATH).validate({ ...good, info: [{ temperature: "5degree" }] });
    expect(result).toEqual({
      ok: false,
      issues: [{ field: "info", index: null, value: [{ temperature: "5degree" }], error: "must be an object" }],
    });
  });

  it("reports a missing required parent once, without its children", () => {
    const { info: _, ...rest } = good;
    expect(compileSchema(map, PATH).validate(rest)).toEqual({ ok: false, issues: [{ field: "info", index: null, error: "must be an object" }] });
  });

  it("names an attribute of an array of objects arr[i][attr] with index i", () => {
    const result = compileSchema(map, PATH).validate({ ...good, countries: [{ name: "fr" }, { name: 5 }] });
    expect(result).toEqual({ ok: false, issues: [{ field: "countries[1][name]", index: 1, value: 5, error: "must be a string" }] });
  });

  it("names deeper arrays [] with the innermost index", () => {
    const result = compileSchema(map, PATH).validate({ ...good, countries: [{ name: "fr", cities: [{ id: 1 }, { id: 2 }, { id: "x" }] }] });
    expect(result).toEqual({ ok: false, issues: [{ field: "countries[0][cities][][id]", index: 2, value: "x", error: "must be an integer" }] });
    const deep = compileSchema(map, PATH).validate({ ...good, a: { b: [{ c: 1 }, { c: "y" }] } });
    expect(deep).toEqual({ ok: false, issues: [{ field: "a[b][][c]", index: 1, value: "y", error: "must be an integer" }] });
  });

  it("keeps the array index for an object inside an array (the original gave null)", () => {
    const result = compileSchema(map, PATH).validate({ ...good, countries: [{ name: "a" }, { name: "b", info: { t: "z" } }] });
    expect(result).toEqual({ ok: false, issues: [{ field: "countries[1][info][t]", index: 1, value: "z", error: "must be an integer" }] });
  });

  it("refuses an element of an array of objects that is not an object", () => {
    const result = compileSchema(map, PATH).validate({ ...good, countries: [{ name: "a" }, 1, null] });
    expect(result).toEqual({
      ok: false,
      issues: [
        { field: "countries[1]", index: 1, value: 1, error: "must be an object" },
        { field: "countries[2]", index: 2, value: null, error: "must be an object" },
      ],
    });
  });

  it("checks only declared attributes and lets the others through", () => {
    const value = { ...good, unknown: { anything: [1, 2] }, info: { temperature: "x", other: 5 } };
    expect(compileSchema(map, PATH).validate(value)).toEqual({ ok: true, value });
  });
});

describe("schema roots", () => {
  it("answers No value for a null or undefined root", () => {
    const schema = compileSchema({ id: ["int"] }, PATH);
    for (const value of [null, undefined]) {
      expect(schema.validate(value)).toEqual({ ok: false, issues: [{ field: "", index: null, error: "No value" }] });
    }
    expect(compileSchema([{ id: ["int"] }], PATH).validate(null)).toEqual({ ok: false, issues: [{ field: "", index: null, error: "No value" }] });
  });

  it("gives one root issue when an object map receives something else", () => {
    const schema = compileSchema({ id: ["int"], name: ["string"] }, PATH);
    for (const value of [5, "abc", [{ id: 1, name: "a" }], true]) {
      expect(schema.validate(value)).toEqual({ ok: false, issues: [{ field: "", index: null, value, error: "must be an object" }] });
    }
  });

  it("checks a root array of objects with the original's field and index", () => {
    const schema = compileSchema([{ id: ["int", "<<idMenu>>"], continent: ["string", "<idContinent>"] }], PATH);
    expect(schema.validate([{ id: 1, continent: "france" }, { id: 3, continent: "england" }]).ok).toBe(true);
    expect(schema.validate([])).toEqual({ ok: true, value: [] });
    expect(schema.validate([{ id: 1, continent: "france" }, { id: "bullshit", continent: "england" }])).toEqual({
      ok: false,
      issues: [{ field: "id", index: 1, value: "bullshit", error: "must be an integer" }],
    });
  });

  it("refuses a non-array for a root array map, and non-object elements", () => {
    const schema = compileSchema([{ id: ["int"] }], PATH);
    expect(schema.validate({ id: 1 })).toEqual({ ok: false, issues: [{ field: "", index: null, value: { id: 1 }, error: "must be an array" }] });
    expect(schema.validate([{ id: 1 }, 5])).toEqual({ ok: false, issues: [{ field: "[1]", index: 1, value: 5, error: "must be an object" }] });
  });

  it("names an array inside a root array from its attribute", () => {
    const schema = compileSchema([{ items: ["array", { price: ["decimal"] }] }], PATH);
    expect(schema.validate([{ items: [] }, { items: [{ price: "1.5" }, { price: "x" }] }])).toEqual({
      ok: false,
      issues: [{ field: "items[1][price]", index: 1, value: "x", error: "must be a decimal" }],
    });
  });

  it("returns every issue together, in descriptor order", () => {
    const schema = compileSchema({ id: ["int"], name: ["string", "min", 2], tags: ["array"], mail: ["email"] }, PATH);
    const result = schema.validate({ id: "x", name: "a", tags: {}, mail: "nope", extra: 1 });
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.issues.map((issue) => issue.field)).toEqual(["id", "name", "tags", "mail"]);
      expect(result.issues.every((issue) => !issue.error.includes("${"))).toBe(true);
    }
  });

  it("never throws, even on a value whose attribute getter throws", () => {
    const hostile = {
      get id(): number {
        throw new Error("boom");
      },
    };
    const result = compileSchema({ id: ["int"] }, PATH).validate(hostile);
    expect(result).toEqual({ ok: false, issues: [{ field: "", index: null, error: "could not be validated" }] });
    expect(compileSchema({ id: ["int"] }, PATH).validate({ id: 10n }).ok).toBe(false);
  });
});

describe("schema Lunaris leftovers", () => {
  it("ignores <col> and <<pk>> annotations next to a type", () => {
    expectAccepts(["int", "<idMenu>"], [1]);
    expectRefuses(["<<idMenu>>", "string"], [5], "must be a string");
  });

  it("reads <<type>> as that type, as the original did outside root arrays", () => {
    expectRefuses(["<<int>>"], ["bad"], "must be an integer");
    expectAccepts(["int", "<<int>>"], [3]);
  });

  it("leaves a field made only of annotations unchecked", () => {
    const schema = compileSchema({ id: ["<idMenu>"], continent: ["<< idContinent >>"] }, PATH);
    expect(schema.validate({}).ok).toBe(true);
    expect(schema.validate({ id: "anything", continent: null }).ok).toBe(true);
  });
});
