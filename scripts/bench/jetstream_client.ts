/**
 * NATS JetStream behind the bench worker's client calls (src/bench/worker/connect.ts
 * BenchClient), so the peer comparison (scripts/peers.ts) measures it with the same publisher and
 * consumer code, bodies, windows and clocks as Kitten-MQ:
 *
 * - `send(channel, body)`: a JetStream publish of the body encoded with cbor-x (the bytes the
 *   Kitten-MQ client sends), resolved by the stream's acknowledgement (PubAck: stored by the
 *   stream's replicas, as its configuration asks);
 * - `consume(channel, handler, {prefetch})`: a durable pull consumer named after the worker's
 *   client id, explicit acks, at most `prefetch` messages unacked (`max_ack_pending`), each
 *   message acked by the handler's `ack()`;
 * - channel `endpoint/version/id` is subject `endpoint.version.id`, in the stream that
 *   scripts/bench/jetstream_servers.ts creates.
 */
import { decode, encode } from "cbor-x";
import { AckPolicy, connect as natsConnect, type NatsConnection } from "nats";
import { type BenchClient, codedError, type WorkerIo, type WorkerOptions } from "../../src/bench/worker/mod.ts";

/** The stream every run publishes to (created by the servers' setup). */
export const STREAM = "KITTEN_BENCH";
/** Its subjects: every channel of the run, as `endpoint.version.id`. */
export const STREAM_SUBJECTS = ["bench.>"];

export function subjectOf(channel: string): string {
  if (!/^[\w-]+(\/[\w-]+)*$/.test(channel)) throw new TypeError(`channel "${channel}" cannot be a subject`);
  return channel.replaceAll("/", ".");
}

const CONNECT_TIMEOUT_MS = 10_000;

export async function connectJetStream(options: WorkerOptions, io: WorkerIo): Promise<BenchClient> {
  const servers = options.hosts ?? (options.host ? [options.host] : []);
  if (servers.length === 0) throw new TypeError(`bench worker options need "host" or "hosts"`);
  let nc: NatsConnection;
  try {
    nc = await natsConnect({ servers, timeout: CONNECT_TIMEOUT_MS, name: options.clientId });
  } catch (error) {
    throw codedError("UNREACHABLE", `Cannot connect to ${servers.join(", ")}: ${(error as Error).message}`);
  }
  void (async () => {
    for await (const status of nc.status()) if (status.type === "error") io.warn(`nats: ${String(status.data)}`);
  })();
  const js = nc.jetstream();
  const jsm = await nc.jetstreamManager();
  const failed = (error: unknown) => ({ code: "INTERNAL", message: (error as Error).message ?? String(error) });

  const consume: BenchClient["consume"] = (channel, handler, { prefetch }) => {
    const ready = (async () => {
      const durable = options.clientId.replace(/[^\w-]/g, "_");
      await jsm.consumers.add(STREAM, {
        durable_name: durable,
        ack_policy: AckPolicy.Explicit,
        filter_subject: subjectOf(channel),
        max_ack_pending: prefetch,
      });
      const consumer = await js.consumers.get(STREAM, durable);
      const messages = await consumer.consume({ max_messages: prefetch });
      void (async () => {
        try {
          for await (const message of messages) handler(null, decode(message.data), () => message.ack());
        } catch (error) {
          if (!nc.isClosed()) handler(failed(error), undefined, () => {});
        }
      })();
    })();
    return { ready };
  };

  return {
    send: (channel, body) => js.publish(subjectOf(channel), encode(body)),
    consume,
    listen: () => {
      throw codedError("USAGE", "the JetStream comparison has no listen scenario");
    },
    disconnect: async () => {
      await nc.drain();
    },
  };
}
