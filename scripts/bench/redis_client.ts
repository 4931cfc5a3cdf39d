/**
 * Redis Streams behind the bench worker's client calls (src/bench/worker/connect.ts BenchClient),
 * so the peer comparison (scripts/peers.ts) measures it with the same publisher and consumer code
 * as Kitten-MQ:
 *
 * - `send(channel, body)`: XADD of the body encoded with cbor-x (the bytes the Kitten-MQ client
 *   sends) to the stream named after the channel, resolved by Redis' reply. With
 *   `appendfsync always` (scripts/bench/redis_server.ts) Redis answers once the AOF holding the
 *   write is fsynced, as a Kitten-MQ broker in fsync mode confirms;
 * - `consume(channel, handler, {prefetch})`: a consumer group named after the worker's client id,
 *   XREADGROUP `COUNT prefetch` on a connection of its own (a blocking read holds it), and XACK for
 *   each message the handler acks. Acked entries stay in the stream (XACK does not delete them;
 *   that is how Redis Streams work queues are used): a Kitten-MQ broker deletes what is acked.
 * Commands are pipelined (ioredis' auto-pipelining), as the Kitten-MQ client batches its frames.
 */
import { decode, encode } from "cbor-x";
import Redis from "ioredis";
import { type BenchClient, codedError, type WorkerIo, type WorkerOptions } from "../../src/bench/worker/mod.ts";

/** How long one XREADGROUP waits for entries before it is sent again (ms). */
const BLOCK_MS = 100;

export const streamKey = (channel: string) => `kitten-bench:${channel}`;

/** XREADGROUP with the entries as Buffers: ioredis has the method, its types do not. */
function readGroup(redis: Redis, ...args: (string | number)[]): Promise<unknown> {
  return (redis as unknown as { xreadgroupBuffer(...args: (string | number)[]): Promise<unknown> }).xreadgroupBuffer(...args);
}

export async function connectRedis(options: WorkerOptions, io: WorkerIo): Promise<BenchClient> {
  const host = options.hosts?.[0] ?? options.host;
  const [address, port] = (host ?? "").split(":");
  if (!address || !Number.isInteger(Number(port))) throw new TypeError(`bench worker options need "host" as HOST:PORT: ${host}`);
  const open = async () => {
    const redis = new Redis({ host: address, port: Number(port), enableAutoPipelining: true, lazyConnect: true, maxRetriesPerRequest: 1 });
    redis.on("error", (error: Error) => io.warn(`redis: ${error.message}`));
    try {
      await redis.connect();
    } catch (error) {
      redis.disconnect();
      throw codedError("UNREACHABLE", `Cannot connect to ${host}: ${(error as Error).message}`);
    }
    return redis;
  };
  const redis = await open();
  const readers: Redis[] = [];
  let closed = false;

  const consume: BenchClient["consume"] = (channel, handler, { prefetch }) => {
    const key = streamKey(channel);
    const group = options.clientId;
    const ready = (async () => {
      const reader = await open();
      readers.push(reader);
      await redis.xgroup("CREATE", key, group, "0", "MKSTREAM").catch((error: Error) => {
        if (!error.message.startsWith("BUSYGROUP")) throw error;
      });
      void (async () => {
        try {
          while (!closed) {
            const streams = await readGroup(reader, "GROUP", group, "c", "COUNT", prefetch, "BLOCK", BLOCK_MS, "STREAMS", key, ">");
            for (const [, entries] of (streams ?? []) as [Buffer, [Buffer, Buffer[]][]][]) {
              for (const [id, fields] of entries) handler(null, decode(fields[1]!), () => void redis.xack(key, group, id));
            }
          }
        } catch (error) {
          if (!closed) handler({ code: "INTERNAL", message: (error as Error).message }, undefined, () => {});
        }
      })();
    })();
    return { ready };
  };

  return {
    send: (channel, body) => redis.xaddBuffer(streamKey(channel), "*", "b", encode(body)),
    consume,
    listen: () => {
      throw codedError("USAGE", "the Redis comparison has no listen scenario");
    },
    disconnect: async () => {
      closed = true;
      for (const reader of readers) reader.disconnect();
      await redis.quit();
    },
  };
}
