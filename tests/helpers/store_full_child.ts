/**
 * Disk-failure child, run by sqlite_store_test.ts inside a private mount namespace on a small tmpfs:
 * `bun tests/helpers/store_full_child.ts <scenario> <tmpfs directory>`. Prints one JSON line.
 *
 * - `full`: a filler file takes part of the tmpfs; appends (fsync mode) run until the disk is
 *   full, then the filler is deleted and appends go on. Reports what was confirmed, the error,
 *   `healthy` before and after, and what load() returns.
 * - `readonly`: writes a store, remounts the tmpfs read-only, opens the store again.
 */
import { spawnSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { Logger } from "../../src/server/log.ts";
import { SqliteStore } from "../../src/server/store/sqlite_store.ts";
import type { StoredMessage } from "../../src/server/store/store.ts";

const [scenario, mount] = process.argv.slice(2);
if (!scenario || !mount) throw new Error("usage: store_full_child.ts full|readonly <tmpfs directory>");
const directory = `${mount}/data`;
const quiet = new Logger(99);
const message = (n: number): StoredMessage => ({
  id: `full.${n}`,
  queue: "disk/v1",
  destination: "*",
  body: new Uint8Array(8192).fill(n & 255),
  created: n,
});
const describe = (error: unknown) => ({
  code: (error as { code?: string }).code,
  message: (error as Error).message,
});

if (scenario === "full") {
  writeFileSync(`${mount}/filler`, new Uint8Array(1280 * 1024));
  const store = new SqliteStore({ directory, mode: "fsync", logger: quiet });
  const confirmed: string[] = [];
  let failure: ReturnType<typeof describe> | null = null;
  let n = 0;
  while (failure === null && n < 2000) {
    const batch = [message(n++), message(n++)];
    try {
      await Promise.all(batch.map((m) => store.append(m)));
      confirmed.push(...batch.map((m) => m.id));
    } catch (error) {
      failure = describe(error);
    }
  }
  const healthyAfterFailure = store.healthy;
  let refusedAgain: ReturnType<typeof describe> | null = null;
  try {
    await store.append(message(n++));
  } catch (error) {
    refusedAgain = describe(error);
  }
  rmSync(`${mount}/filler`);
  const last = message(n++);
  await store.append(last);
  confirmed.push(last.id);
  const healthyAfterRecovery = store.healthy;
  const loaded = store.load().map((m) => m.id);
  store.close();
  const reopened = new SqliteStore({ directory, logger: quiet });
  const reloaded = reopened.load().map((m) => m.id);
  reopened.close();
  console.log(JSON.stringify({ confirmed, failure, refusedAgain, healthyAfterFailure, healthyAfterRecovery, loaded, reloaded }));
} else if (scenario === "readonly") {
  const store = new SqliteStore({ directory, logger: quiet });
  await store.append(message(1));
  store.close();
  const remount = spawnSync("mount", ["-o", "remount,ro", mount], { encoding: "utf8" });
  if (remount.status !== 0) {
    console.log(JSON.stringify({ skipped: `remount failed: ${remount.stderr.trim()}` }));
  } else {
    let opened: ReturnType<typeof describe> | null = null;
    try {
      new SqliteStore({ directory, logger: quiet }).close();
    } catch (error) {
      opened = describe(error);
    }
    console.log(JSON.stringify({ opened }));
  }
} else {
  throw new Error(`unknown scenario ${scenario}`);
}
