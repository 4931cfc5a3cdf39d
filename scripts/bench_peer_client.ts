/**
 * One client process of the peer comparison (scripts/peers.ts starts it; it is not meant to be
 * run by hand): the bench worker of src/bench/worker/ on a peer instead of Kitten-MQ.
 *
 *   bun scripts/bench_peer_client.ts <jetstream|redis> <publisher|consumer> '<json options>'
 */
import { type Connector, processIo, workerMain } from "../src/bench/worker/mod.ts";
import { connectJetStream } from "./bench/jetstream_client.ts";
import { connectRedis } from "./bench/redis_client.ts";

const PEERS: Record<string, Connector> = { jetstream: connectJetStream, redis: connectRedis };

if (import.meta.main) {
  const [peer, ...args] = process.argv.slice(2);
  const open = PEERS[peer ?? ""];
  if (open === undefined) {
    console.error(`bench peer client: unknown peer "${peer}"; usage: <${Object.keys(PEERS).join("|")}> <role> '<json options>'`);
    process.exit(1);
  }
  workerMain(args, processIo(), open).then((code) => process.exit(code));
}
