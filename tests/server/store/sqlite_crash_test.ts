import { expect, it } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { memoryLogger } from "../../../src/server/log.ts";
import { SqliteStore } from "../../../src/server/store/sqlite_store.ts";

const child = join(import.meta.dir, "../../helpers/store_crash_child.ts");

/**
 * Runs the child until it has confirmed `target` messages (or 1.5 s passed), kills it with
 * SIGKILL and returns the ids it printed, that is the ids whose append had resolved.
 */
async function runAndKill(directory: string, prefix: string, target: number): Promise<string[]> {
  const proc = Bun.spawn([process.execPath, child, directory, prefix], { stdout: "pipe", stderr: "pipe" });
  const confirmed: string[] = [];
  const decoder = new TextDecoder();
  const reader = proc.stdout.getReader();
  const deadline = Date.now() + 1500;
  let partial = "";
  while (confirmed.length < target && Date.now() < deadline) {
    const read = await Promise.race([reader.read(), Bun.sleep(deadline - Date.now()).then(() => null)]);
    if (read === null || read.done) break;
    const lines = (partial + decoder.decode(read.value, { stream: true })).split("\n");
    partial = lines.pop()!; // An incomplete last line is not a confirmation yet.
    confirmed.push(...lines);
  }
  proc.kill("SIGKILL");
  await proc.exited;
  reader.releaseLock();
  if (proc.signalCode !== "SIGKILL") throw new Error(`child ended on its own: ${await new Response(proc.stderr).text()}`);
  return confirmed;
}

it("SqliteStore in fsync mode keeps every confirmed message across kill -9 (3 cycles)", async () => {
  const directory = mkdtempSync(join(tmpdir(), "kitten-crash-"));
  try {
    const confirmed: string[] = [];
    for (let cycle = 0; cycle < 3; cycle++) {
      const ids = await runAndKill(directory, `c${cycle}`, 300 + Math.floor(Math.random() * 3000));
      expect(ids.length).toBeGreaterThan(0);
      confirmed.push(...ids);
    }
    const store = new SqliteStore({ directory, logger: memoryLogger() });
    const loaded = new Set(store.load().map((message) => message.id));
    store.close();
    // The child removes (acks) every message whose counter is a multiple of 3 once it is confirmed.
    const kept = confirmed.filter((id) => Number(id.slice(id.indexOf(".") + 1)) % 3 !== 0);
    const lost = kept.filter((id) => !loaded.has(id));
    expect(lost).toEqual([]);
    expect(kept.length).toBeGreaterThan(100);
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
}, 10_000);
