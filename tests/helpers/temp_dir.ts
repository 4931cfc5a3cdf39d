/**
 * Temp folders for tests. A file makes one `TempDirs` (its prefix names the folders, so a leftover
 * tells where it came from), calls `make()` for each folder it needs and `removeAll()` from the
 * hook that fits its cleanup order: `afterAll`, or `afterEach` once its brokers have stopped.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export class TempDirs {
  #dirs: string[] = [];

  constructor(readonly prefix = "kitten-test-") {}

  /** A new empty folder in the OS temp folder, named `<prefix>XXXXXX`; `removeAll()` deletes it. */
  make = (prefix: string = this.prefix): string => {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    this.#dirs.push(dir);
    return dir;
  };

  /** Deletes every folder made so far (ones already gone are fine); `make()` works again after. */
  removeAll = (): void => {
    for (const dir of this.#dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  };
}
