/**
 * A broker keeps its store's index of messages by id only in a cluster (its slave checks ask by
 * id); a lone broker stores and deletes each message without it.
 */
import { afterAll, expect, it } from "bun:test";
import { join } from "node:path";
import { parseConfig } from "../../../src/server/config/config.ts";
import { memoryLogger } from "../../../src/server/log.ts";
import { startBroker } from "../../../src/server/server.ts";
import { messageIndexes } from "../../helpers/sqlite_store.ts";
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
  return messageIndexes(join(root, "data"));
}

it("a broker with cluster peers keeps the index by id; the same data directory run alone drops it", async () => {
  const root = temps.make();
  // The peer is never reached: the index is decided when the store opens.
  expect(await indexesAfterRun(root, { peers: ["127.0.0.1:9@broker-2"] })).toContain("messages_by_id");
  expect(await indexesAfterRun(root, { peers: [] })).not.toContain("messages_by_id");
});
