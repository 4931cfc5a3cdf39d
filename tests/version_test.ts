/**
 * One version source: package.json "version". deno.json, src/version.ts and install.sh carry
 * copies that scripts/compile.ts checks before it builds; this test checks the same in npm test.
 */
import { describe, expect, test } from "bun:test";
import { readVersions, versionProblems } from "../scripts/compile.ts";
import { VERSION as MOD_VERSION } from "../mod.ts";
import { PROTOCOL_VERSION, STORE_VERSION, VERSION } from "../src/version.ts";

describe("version stamps", () => {
  test("package.json, deno.json, src/version.ts and install.sh carry the same version", () => {
    const stamps = readVersions();
    expect(versionProblems(stamps)).toEqual([]);
    expect(VERSION).toBe(stamps.packageJson);
    expect(MOD_VERSION).toBe(stamps.packageJson);
  });

  test("protocol and store versions are positive integers", () => {
    expect(Number.isInteger(PROTOCOL_VERSION) && PROTOCOL_VERSION > 0).toBe(true);
    expect(Number.isInteger(STORE_VERSION) && STORE_VERSION > 0).toBe(true);
  });

  test("a mismatch is reported with where to fix it", () => {
    const problems = versionProblems({ packageJson: "1.2.3", denoJson: "1.2.2", versionTs: null, installSh: "1.2.3" }, "v1.2.4");
    expect(problems).toHaveLength(3);
    expect(problems[0]).toContain('deno.json "version" is "1.2.2" but package.json "version" is "1.2.3"');
    expect(problems[1]).toContain("VERSION in src/version.ts is missing");
    expect(problems[2]).toContain('the tag "v1.2.4" does not match');
    expect(versionProblems({ packageJson: "1.2.3", denoJson: "1.2.3", versionTs: "1.2.3", installSh: "1.2.3" }, "v1.2.3")).toEqual([]);
    expect(versionProblems({ packageJson: "one", denoJson: "one", versionTs: "one", installSh: "one" })[0]).toContain("expected a semver");
  });

  test("compile.ts --check fails with a clear message when a stamp disagrees", async () => {
    // Run against a copy of the four files, so the repository is never touched.
    const { mkdtempSync, mkdirSync, copyFileSync, writeFileSync, readFileSync, rmSync } = await import("node:fs");
    const { join } = await import("node:path");
    const { tmpdir } = await import("node:os");
    const root = join(import.meta.dir, "..");
    const dir = mkdtempSync(join(tmpdir(), "kitten-version-"));
    try {
      mkdirSync(join(dir, "src"));
      mkdirSync(join(dir, "scripts"));
      for (const file of ["package.json", "install.sh", "src/version.ts", "scripts/compile.ts"]) copyFileSync(join(root, file), join(dir, file));
      const deno = JSON.parse(readFileSync(join(root, "deno.json"), "utf8"));
      writeFileSync(join(dir, "deno.json"), JSON.stringify({ ...deno, version: "0.0.0-wrong" }));
      const child = Bun.spawn([process.execPath, join(dir, "scripts/compile.ts"), "--check"], { stdout: "pipe", stderr: "pipe" });
      const [stderr, code] = await Promise.all([new Response(child.stderr).text(), child.exited]);
      expect(code).toBe(1);
      expect(stderr).toContain('deno.json "version" is "0.0.0-wrong" but package.json "version" is');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
