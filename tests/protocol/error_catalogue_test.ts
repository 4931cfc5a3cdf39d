/**
 * The error catalogue is the one place that says what a code means: fatal, retryable, its HTTP
 * status. PROTOCOL.md's table must say the same, and every message written in src/ reads
 * "Cannot X: why".
 */
import { describe, expect, it } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type ErrorCode, ERRORS, isRetryable } from "../../src/protocol/errors.ts";

const ROOT = join(import.meta.dir, "../..");
const CODES = Object.keys(ERRORS) as ErrorCode[];

/** `| \`CODE\` | yes | no | …` rows of PROTOCOL.md's "Error codes" section. */
function documentedCodes(): Map<string, { fatal: boolean; retryable: boolean }> {
  const text = readFileSync(join(ROOT, "PROTOCOL.md"), "utf8");
  const section = text.slice(text.indexOf("## Error codes"), text.indexOf("\n## ", text.indexOf("## Error codes") + 1));
  const rows = new Map<string, { fatal: boolean; retryable: boolean }>();
  for (const match of section.matchAll(/^\| `([A-Z_]+)` \| (yes|no) \| (yes|no) \|/gm)) {
    rows.set(match[1]!, { fatal: match[2] === "yes", retryable: match[3] === "yes" });
  }
  return rows;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    return entry.isDirectory() ? sourceFiles(path) : entry.name.endsWith(".ts") ? [path] : [];
  });
}

describe("error catalogue", () => {
  it("every code says whether it is retryable, and isRetryable() reads it", () => {
    for (const code of CODES) {
      expect(typeof ERRORS[code].retryable).toBe("boolean");
      expect(isRetryable(code)).toBe(ERRORS[code].retryable);
    }
    // The client dials again after these fatal codes, and stops after a refusal.
    for (const code of ["BAD_FRAME", "FRAME_TOO_LARGE", "TOO_MANY_CONNECTIONS"] as const) expect(isRetryable(code)).toBe(true);
    for (const code of ["AUTH_FAILED", "KEY_MISMATCH", "BAD_PROTOCOL", "BAD_CLIENT_ID"] as const) expect(isRetryable(code)).toBe(false);
  });

  it("PROTOCOL.md lists every code once, with the catalogue's fatal and retryable", () => {
    const documented = documentedCodes();
    expect([...documented.keys()].sort()).toEqual([...CODES].sort());
    for (const code of CODES) {
      expect({ code, ...documented.get(code) }).toEqual({ code, fatal: ERRORS[code].fatal, retryable: ERRORS[code].retryable });
    }
  });

  it("every KittenError message written in src/ reads \"Cannot X: why\"", () => {
    const offenders: string[] = [];
    for (const file of sourceFiles(join(ROOT, "src"))) {
      const text = readFileSync(file, "utf8");
      // The message argument when it is written in place: a string or a template literal.
      for (const match of text.matchAll(/new KittenError\(\s*"[A-Z_]+",\s*(["`])((?:\\.|(?!\1).)*)/g)) {
        const message = match[2]!;
        // `${action} …` and the like: the prefix is built elsewhere, and checked where it is.
        if (message.startsWith("Cannot ") || message.startsWith("${")) continue;
        const line = text.slice(0, match.index).split("\n").length;
        offenders.push(`${file.slice(ROOT.length + 1)}:${line}: ${message.slice(0, 60)}`);
      }
    }
    expect(offenders).toEqual([]);
  });
});
