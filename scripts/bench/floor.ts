/**
 * The latency floor of the machine, measured next to scenario (c): the same three processes, the
 * same runtime and the same pacing, but a bare TCP relay in place of Kitten-MQ. Whatever p99 the
 * relay shows is the part of (c)'s p99 no broker can remove on this machine at this hour (process
 * wake-ups on two shared cores). Percentiles do not add up, so (c)'s p99 minus the floor's is a
 * gap between the two, not an amount Kitten-MQ and its client add to each message.
 *
 *   relay  Bun.listen on two ports, as the broker (src/server/tcp.ts): forwards every chunk from
 *          the publisher to the subscriber and answers each chunk with one byte, as the broker's
 *          confirmation would; reads the subscriber's acknowledgement bytes.
 *   pub    node:net, as the client (src/client/transport.ts): every ~1 ms timer tick it writes the
 *          messages the schedule says are due, each a ~95-byte line stamped with the shared clock;
 *          reports the rate it achieved and its largest batch, as bench_client.ts's rate role does.
 *   sub    node:net: stamps each line on arrival, answers each chunk with one byte (an ack).
 *
 *   bun scripts/bench/floor.ts <relay|pub|sub> '<json options>'   (started by scripts/bench.ts)
 *
 * Nothing here imports the Kitten-MQ client (src/bench/worker/stats.ts holds the shared clock and
 * percentiles): the floor processes must not load it.
 */
import type { Socket } from "bun";
import { connect } from "node:net";
import { join } from "node:path";
import { Child, ROOT, withTimeout } from "./processes.ts";
import { type Latency, now, percentiles } from "../../src/bench/worker/stats.ts";

export interface FloorResult {
  latency: Latency;
  /** The publisher's sends per second, from its first send to its last (as the rate role's). */
  achievedRate: number;
  /** The most messages the publisher wrote in one timer tick. */
  maxBatch: number;
}

interface Options {
  port?: number;
  rate: number;
  seconds: number;
  warmupSeconds: number;
}

/** Pads a message line to about the size of scenario (c)'s CBOR body. */
const PADDING = "x".repeat(64);

/** Runs one floor measurement: relay, subscriber, then publisher; stops all three. */
export async function runFloor(options: Omit<Options, "port">, timeoutMs: number): Promise<FloorResult> {
  const script = join(ROOT, "scripts", "bench", "floor.ts");
  const children: Child[] = [];
  let over = false;
  const spawn = (role: string, extra: Partial<Options> = {}) => {
    // Past the timeout the run goes on in the background until its next wait fails: start nothing.
    if (over) throw new Error(`the floor run is over: ${role} not started`);
    const child = new Child(`floor ${role}`, [process.execPath, script, role, JSON.stringify({ ...options, ...extra })]);
    children.push(child);
    return child;
  };
  try {
    return await withTimeout(
      (async () => {
        const relay = spawn("relay");
        const [publisherPort, subscriberPort] = (await relay.waitFor("ready")).split(" ").map(Number);
        const sub = spawn("sub", { port: subscriberPort });
        await sub.waitFor("ready");
        const pub = spawn("pub", { port: publisherPort });
        const [received, sent] = await Promise.all([
          sub.waitJson<{ latency: Latency | null }>("result"),
          pub.waitJson<{ achievedRate: number; maxBatch: number }>("result"),
        ]);
        if (!received.latency) throw new Error("the floor subscriber measured no message");
        return { latency: received.latency, achievedRate: sent.achievedRate, maxBatch: sent.maxBatch };
      })(),
      timeoutMs,
      `the floor run did not finish within ${timeoutMs / 1000} s`,
    );
  } finally {
    over = true;
    await Promise.all(children.map((child) => child.stop()));
  }
}

/** How far the publisher's achieved rate may stray from the asked one and still count as "the same pacing". */
export const PACING_TOLERANCE = 0.1;

/**
 * A warning when the floor publisher did not keep its schedule (achieved rate more than
 * PACING_TOLERANCE away from `rate`): its p99 then describes another pacing than (c)'s. Null when
 * it kept it. A rate depends on the machine, so it is checked here, in `npm run bench`, not in tests.
 */
export function pacingWarning(result: Pick<FloorResult, "achievedRate">, rate: number): string | null {
  if (Math.abs(result.achievedRate - rate) <= rate * PACING_TOLERANCE) return null;
  return `floor pacing not kept: sent at ${result.achievedRate}/s, asked ${rate}/s (more than ±${PACING_TOLERANCE * 100}%)`;
}

/**
 * What one socket of the relay did not take yet. Bun TCP sockets do not buffer: `write()` returns
 * how much it took and the rest would be lost. As the broker's session does, the rest waits here,
 * in order, for `drain`; it also holds what arrives before the subscriber has connected.
 */
class Outbox {
  #socket: Socket<unknown> | null = null;
  #unsent: Uint8Array[] = [];

  /** The socket is open: what waited for it goes first. */
  open(socket: Socket<unknown>): void {
    this.#socket = socket;
    this.drain();
  }

  write(bytes: Uint8Array): void {
    if (this.#socket && this.#unsent.length === 0) {
      const written = Math.max(this.#socket.write(bytes), 0);
      if (written >= bytes.length) return;
      bytes = bytes.subarray(written);
    }
    this.#unsent.push(bytes.slice()); // a copy: the chunk is Bun's, valid only inside `data`
  }

  /** The socket can take more: writes what waited until it takes no more. */
  drain(): void {
    if (!this.#socket) return;
    while (this.#unsent.length > 0) {
      const bytes = this.#unsent[0]!;
      const written = Math.max(this.#socket.write(bytes), 0);
      if (written < bytes.length) {
        this.#unsent[0] = bytes.subarray(written);
        return;
      }
      this.#unsent.shift();
    }
  }
}

function relay(): void {
  const subscriber = new Outbox();
  const publishers = Bun.listen<Outbox>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(socket) {
        socket.data = new Outbox();
        socket.data.open(socket);
      },
      data(socket, chunk) {
        subscriber.write(chunk);
        socket.data.write(ONE_BYTE);
      },
      drain(socket) {
        socket.data.drain();
      },
    },
  });
  const subscribers = Bun.listen({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(socket) {
        subscriber.open(socket);
      },
      data() {},
      drain() {
        subscriber.drain();
      },
    },
  });
  process.stdout.write(`ready ${publishers.port} ${subscribers.port}\n`);
}

const ONE_BYTE = new Uint8Array([1]);

function publish(options: Options): void {
  const total = Math.round(options.rate * (options.warmupSeconds + options.seconds));
  const socket = connect({ host: "127.0.0.1", port: options.port! });
  socket.setNoDelay(true);
  socket.on("data", () => {}); // the relay's one-byte confirmations
  socket.on("connect", () => {
    const firstAt = now();
    let sent = 0;
    let maxBatch = 0;
    const tick = () => {
      const due = Math.min(total, Math.floor((now() - firstAt) * options.rate / 1000) + 1);
      maxBatch = Math.max(maxBatch, due - sent);
      let lines = "";
      for (; sent < due; sent++) lines += `${sent} ${now()} ${PADDING}\n`;
      if (lines) socket.write(lines);
      if (sent < total) setTimeout(tick, 1);
      else {
        const achievedRate = Math.round(sent / ((now() - firstAt) / 1000));
        process.stdout.write(`result ${JSON.stringify({ achievedRate, maxBatch })}\n`);
        socket.end();
      }
    };
    tick();
  });
}

function subscribe(options: Options): void {
  const count = Math.round(options.rate * (options.warmupSeconds + options.seconds));
  const skip = Math.round(options.rate * options.warmupSeconds);
  const latency = new Float64Array(count);
  const seen = new Uint8Array(count);
  let received = 0;
  let buffered = "";
  const socket = connect({ host: "127.0.0.1", port: options.port! });
  socket.setNoDelay(true);
  socket.on("connect", () => process.stdout.write("ready\n"));
  socket.on("data", (chunk: Buffer) => {
    const at = now();
    buffered += chunk.toString("latin1");
    let newline: number;
    while ((newline = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      const space = line.indexOf(" ");
      const seq = Number(line.slice(0, space));
      latency[seq] = at - Number(line.slice(space + 1, line.indexOf(" ", space + 1)));
      seen[seq] = 1;
      received++;
    }
    socket.write(ONE_BYTE);
    if (received >= count) {
      process.stdout.write(`result ${JSON.stringify({ latency: percentiles(latency, seen, skip, count) })}\n`);
      socket.destroy();
      process.exit(0);
    }
  });
}

if (import.meta.main) {
  const [role, json] = process.argv.slice(2);
  const options = JSON.parse(json ?? "{}") as Options;
  if (role === "relay") relay();
  else if (role === "pub") publish(options);
  else if (role === "sub") subscribe(options);
  else {
    process.stderr.write(`floor: unknown role "${role}" (relay, pub or sub)\n`);
    process.exit(1);
  }
}
