/**
 * Crash-test child: `bun tests/helpers/store_crash_child.ts <directory> <prefix>` appends messages
 * to a SqliteStore in fsync mode, several batches in flight, and prints `<prefix>.<n>` on its own
 * line once the append of message n resolved (it is confirmed). Messages whose n is a multiple of 3
 * are removed right after their confirmation (acks). It never stops: the parent kills it (SIGKILL).
 */
import { Logger } from "../../src/server/log.ts";
import { SqliteStore } from "../../src/server/store/sqlite_store.ts";
import type { StoredMessage } from "../../src/server/store/store.ts";

const [directory, prefix] = process.argv.slice(2);
if (!directory || !prefix) throw new Error("usage: store_crash_child.ts <directory> <prefix>");
const store = new SqliteStore({ directory, mode: "fsync", logger: new Logger(99) });
const body = new Uint8Array(100).fill(42);
const inFlight = new Set<Promise<void>>();
let n = 0;
for (;;) {
  const messages: StoredMessage[] = [];
  const count = 1 + Math.floor(Math.random() * 200);
  let stored: void | Promise<void> = undefined;
  for (let i = 0; i < count; i++) {
    const message = { id: `${prefix}.${n++}`, queue: "crash/v1", destination: "*", body, created: Date.now() };
    messages.push(message);
    stored = store.append(message);
  }
  const confirmed = Promise.resolve(stored).then(() => {
    process.stdout.write(`${messages.map((message) => message.id).join("\n")}\n`);
    for (const message of messages) if (Number(message.id.slice(prefix.length + 1)) % 3 === 0) store.remove(message);
    inFlight.delete(confirmed);
  });
  inFlight.add(confirmed);
  if (inFlight.size >= 4) await Promise.race(inFlight);
  else await new Promise((resolve) => setImmediate(resolve));
}
