/**
 * A broker keeps its store's index of messages by id only in a cluster (its slave checks ask by
 * id); a lone broker stores and deletes each message without it.
 */
import { Database } from "bun:sqlite";
import { afterAll, expect, it } from "bun:test";
import { join } from "node:path";
import { parseConfig } from "../../../src/server/config/config.ts";
import { memoryLogger } from "../../../src/server/log.ts";
import { STORE_FILE } from "../../../src/server/store/record.ts";
import { startBroker } from "../../../src/server/server.ts";
import { TempDirs } from "../../helpers/temp_dir.ts";

const temps = new TempDirs();
afterAll(() => temps.removeAll());

async function indexesAfterRun(root: string, cluster: Record<string, unknown>): Promise<string[]> {
  const config = parseConfig({
    isManagementInterface: false,
    socketServer: { host: "127.0.0.1", port: 0 },
    registeredClientsPath: join(root, "clients"),
    dataDirectory: join(root, "data"),
    keysDirectory: join(root, "keys"),
    cluster,
  });
  await startBroker(config, { logger: memoryLogger() }).stop();
  const db = new Database(join(root, "data", STORE_FILE), { readonly: true });
  try {
    return db.query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages'").all().map((row) => row.name);
  } finally {
    db.close();
  }
}

it("a broker with cluster peers keeps the index by id; the same data directory run alone drops it", async () => {
  const root = temps.make();
  // The peer is never reached: the index is decided when the store opens.
  expect(await indexesAfterRun(root, { peers: ["127.0.0.1:9@broker-2"] })).toContain("messages_by_id");
  expect(await indexesAfterRun(root, { peers: [] })).not.toContain("messages_by_id");
});
