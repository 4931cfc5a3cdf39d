/**
 * The error catalogue is the one place that says what a code means: fatal, retryable, its HTTP
 * status. PROTOCOL.md's table must say the same, and every message written in src/ reads
 * "Cannot X: why".
 */
import { describe, expect, it } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type ErrorCode, ERRORS, isRetryable, shouldResend } from "../../src/protocol/errors.ts";

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

/** The codes listed under "Refusals a send rides through" in PROTOCOL.md. */
function documentedResends(): string[] {
  const text = readFileSync(join(ROOT, "PROTOCOL.md"), "utf8");
  const start = text.indexOf("### Refusals a send rides through");
  const section = text.slice(start, text.indexOf("\n### ", start + 1));
  return [...section.matchAll(/^- `([A-Z_]+)`/gm)].map((match) => match[1]!);
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

  it("shouldResend() reads the resend flag: the refusals that waiting fixes, each also retryable", () => {
    for (const code of CODES) {
      expect(typeof ERRORS[code].resend).toBe("boolean");
      expect(shouldResend(code)).toBe(ERRORS[code].resend);
      if (shouldResend(code)) expect({ code, retryable: isRetryable(code) }).toEqual({ code, retryable: true });
    }
    // Only codes a broker answers a SEND with: the client reads the flag on a master's answer alone.
    const resent = CODES.filter(shouldResend).sort();
    expect(resent).toEqual(["NOT_ENOUGH_REPLICAS", "QUEUE_MOVING", "STOPPING"]);
    // The client's own causes of a TIMEOUT (no broker answers with them): a send waits, unrefused.
    for (const code of ["CONNECTION_LOST", "NOT_MASTER", "FENCED"] as const) expect(shouldResend(code)).toBe(false);
    // Waiting does not fix these, or fixing them is the application's call: the send fails at once.
    for (const code of ["BAD_FORMAT", "NOT_ALLOWED", "QUEUE_FULL", "DISK_FULL", "TIMEOUT", "CLOSED"] as const) {
      expect(shouldResend(code)).toBe(false);
    }
  });

  it("PROTOCOL.md lists the codes a send rides through, as the catalogue's resend flag says", () => {
    expect(documentedResends().sort()).toEqual(CODES.filter(shouldResend).sort());
  });

  it("PROTOCOL.md names the client's causes of a TIMEOUT where sends ride through, and in their rows", () => {
    const text = readFileSync(join(ROOT, "PROTOCOL.md"), "utf8");
    const start = text.indexOf("### Refusals a send rides through");
    const section = text.slice(start, text.indexOf("\n### ", start + 1));
    for (const code of ["CONNECTION_LOST", "NOT_MASTER", "FENCED"]) {
      expect({ code, named: new RegExp(`\`${code}\`\\s\\(`).test(section) }).toEqual({ code, named: true });
      expect(text).toMatch(new RegExp(`^\\| \`${code}\` \\|[^\\n]*the cause of a \`TIMEOUT\``, "m"));
    }
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
