import { describe, expect, it } from "bun:test";
import { bunFailures } from "../../scripts/test_failures.ts";

describe("npm test repeats each failure at the end", () => {
  const output = [
    "tests/a_test.ts:",
    "(pass) first [1.00ms]",
    "error: expect(received).toBe(expected)",
    "Expected: 2",
    "(fail) second [2.00ms]",
    "(pass) third [1.00ms]",
    "",
    "1 tests failed:",
    "(fail) second [2.00ms]",
  ].join("\n");

  it("takes each failed test once, with the error bun printed above it", () => {
    const failures = bunFailures(output);
    expect(failures).toHaveLength(1);
    expect(failures[0]).toContain("Expected: 2");
    expect(failures[0]!.endsWith("(fail) second [2.00ms]")).toBe(true);
    expect(failures[0]).not.toContain("third");
  });

  it("finds nothing in an output where every test passed", () => {
    expect(bunFailures("(pass) first [1.00ms]\n 1 pass\n 0 fail")).toEqual([]);
  });

  it("keeps at most 40 lines before a failure", () => {
    const long = [...Array.from({ length: 100 }, (_, n) => `line ${n}`), "(fail) late [1.00ms]"].join("\n");
    const [failure] = bunFailures(long);
    expect(failure!.split("\n")).toHaveLength(41);
    expect(failure!.startsWith("line 60")).toBe(true);
  });
});
