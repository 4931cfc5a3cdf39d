/**
 * Preloaded by bun test (bunfig.toml): hooks here run once for the whole run. bun test does not
 * run process exit handlers, so the shared key folder is removed here.
 */
import { afterAll } from "bun:test";
import { rmSync } from "node:fs";
import { testKeysDirectory } from "./keys.ts";

afterAll(() => rmSync(testKeysDirectory, { recursive: true, force: true }));
