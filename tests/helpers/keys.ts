/**
 * One temporary folder per test process for client key pairs, so no test writes keys into the
 * repository. tests/helpers/setup.ts removes it after the run (bun test skips exit handlers;
 * the exit handler below covers scripts that import it).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const testKeysDirectory = mkdtempSync(join(tmpdir(), "kitten-keys-"));
process.on("exit", () => rmSync(testKeysDirectory, { recursive: true, force: true }));
