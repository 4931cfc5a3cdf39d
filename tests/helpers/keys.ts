/**
 * One temporary folder per test process for client key pairs, removed when the process exits,
 * so no test writes keys into the repository.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const testKeysDirectory = mkdtempSync(join(tmpdir(), "kitten-keys-"));
process.on("exit", () => rmSync(testKeysDirectory, { recursive: true, force: true }));
