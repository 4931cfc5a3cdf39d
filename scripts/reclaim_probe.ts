/**
 * How fast a store gives a drained backlog's space back (space.ts), without a broker: a store's
 * database is filled with `rows` rows of 100 bytes and emptied (straight SQL, in big
 * transactions), then a SqliteStore opened on it is ticked as the broker ticks it (`reclaim()`
 * every 25 ms) until its data directory is under 32 MiB (at most 120 s).
 *
 *   bun scripts/reclaim_probe.ts [--rows 10000000] [--by-id] [--id-width 8]
 *
 * `--by-id` keeps the index of messages by id, as a broker with cluster peers or etcd does.
 * Ids are the reference client's, `<prefix>.<base-36 counter>`, the counter written with at
 * least `--id-width` digits (default 8, as the client writes them; 1: as short as it goes).
 * Printed: the directory's size once a second, then the time to get under 32 MiB, how long the
 * ticks' `reclaim()` calls took (the steps it schedules on later turns are not in them) and the
 * slowest step of all (a sender waits for at most one).
 */
import { Database } from "bun:sqlite";
import { mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Logger } from "../src/server/log.ts";
import { STORE_FILE } from "../src/server/store/record.ts";
import { SqliteStore } from "../src/server/store/sqlite_store.ts";

const { values: args } = parseArgs({
  options: { rows: { type: "string", default: "10000000" }, "by-id": { type: "boolean", default: false }, "id-width": { type: "string", default: "8" } },
});
const ROWS = Number(args.rows);
const ID_WIDTH = Number(args["id-width"]);
if (!Number.isSafeInteger(ROWS) || ROWS < 1) throw new RangeError(`--rows must be a positive integer: ${args.rows}`);
if (!Number.isSafeInteger(ID_WIDTH) || ID_WIDTH < 1 || ID_WIDTH > 10) throw new RangeError(`--id-width must be 1 to 10: ${args["id-width"]}`);
const options = { mode: "fsync" as const, logger: new Logger(3), indexById: args["by-id"] };
const TICK_MS = 25;
const TARGET_MIB = 32;
const LIMIT_MS = 120_000;

const directory = mkdtempSync(join(tmpdir(), "kitten-reclaim-probe-"));
const directoryMiB = () => readdirSync(directory).reduce((sum, file) => sum + statSync(join(directory, file)).size, 0) / 2 ** 20;

/** Fills and empties the store's table as a drained backlog leaves it: every row deleted, in order. */
function fillAndDrain(): void {
  new SqliteStore({ directory, ...options }).close(); // the schema
  const db = new Database(join(directory, STORE_FILE));
  const insert = db.prepare("INSERT INTO messages (seq, id, queue, destination, created, body) VALUES (?, ?, ?, ?, ?, ?)");
  const body = new Uint8Array(100).fill(7);
  for (let first = 1; first <= ROWS; first += 50_000) {
    db.transaction(() => {
      for (let seq = first; seq < first + 50_000 && seq <= ROWS; seq++) insert.run(seq, `probe-publisher.${seq.toString(36).padStart(ID_WIDTH, "0")}`, "probe/v1", "*", 0, body);
    })();
  }
  insert.finalize();
  for (let first = 1; first <= ROWS; first += 200_000) db.run(`DELETE FROM messages WHERE seq >= ${first} AND seq < ${first + 200_000}`);
  db.run("PRAGMA wal_checkpoint(TRUNCATE)");
  db.close(true);
}

const filling = performance.now();
fillAndDrain();
console.log(`${ROWS} rows stored and deleted in ${((performance.now() - filling) / 1000).toFixed(1)} s; data directory ${directoryMiB().toFixed(0)} MiB` +
  (options.indexById ? " (with the index by id)" : ""));
const store = new SqliteStore({ directory, ...options });
const calls: number[] = [];
const started = performance.now();
let printed = started;
await new Promise<void>((resolve) => {
  const tick = () => {
    const before = performance.now();
    store.reclaim();
    calls.push(performance.now() - before);
    if (performance.now() - printed >= 1000) {
      printed = performance.now();
      console.log(`  ${((printed - started) / 1000).toFixed(0)} s: ${directoryMiB().toFixed(0)} MiB`);
    }
    if (directoryMiB() < TARGET_MIB || performance.now() - started > LIMIT_MS) return resolve();
    setTimeout(tick, TICK_MS);
  };
  tick();
});
calls.sort((a, b) => a - b);
const at = (share: number) => calls[Math.min(calls.length - 1, Math.floor(calls.length * share))]!.toFixed(2);
console.log(`${directoryMiB().toFixed(1)} MiB after ${((performance.now() - started) / 1000).toFixed(1)} s; ` +
  `${calls.length} ticks, reclaim() p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms; ${store.stats.reclaimSteps} steps, ` +
    `the slowest ${store.stats.maxReclaimMs.toFixed(1)} ms`);
store.close();
rmSync(directory, { recursive: true, force: true });
