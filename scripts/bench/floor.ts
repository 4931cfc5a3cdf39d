/**
 * The latency floor of the machine, measured next to scenario (c): the same three processes, the
 * same runtime and the same pacing, but a bare TCP relay in place of Kitten-MQ. Whatever p99 the
 * relay shows is the part of (c)'s p99 no broker can remove on this machine at this hour (process
 * wake-ups on two shared cores); the difference is what Kitten-MQ and its client add.
 *
 *   relay  Bun.listen on two ports, as the broker (src/server/tcp.ts): forwards every chunk from
 *          the publisher to the subscriber and answers each chunk with one byte, as the broker's
 *          confirmation would; reads the subscriber's acknowledgement bytes.
 *   pub    node:net, as the client (src/client/transport.ts): every ~1 ms timer tick it writes the
 *          messages the schedule says are due, each a ~95-byte line stamped with the shared clock.
 *   sub    node:net: stamps each line on arrival, answers each chunk with one byte (an ack).
 *
 *   bun scripts/bench/floor.ts <relay|pub|sub> '<json options>'   (started by scripts/bench.ts)
 */
import { connect } from "node:net";
import { join } from "node:path";
import { percentiles } from "../bench_client.ts";
import type { Latency } from "./results.ts";
import { Child, ROOT, withTimeout } from "./processes.ts";

export interface FloorResult {
  latency: Latency;
  /** CPU seconds of the relay, publisher and subscriber over the whole floor run. */
  cpuS: number;
}

interface Options {
  port?: number;
  rate: number;
  seconds: number;
  warmupSeconds: number;
}

const now = () => performance.timeOrigin + performance.now();
/** Pads a message line to about the size of scenario (c)'s CBOR body. */
const PADDING = "x".repeat(64);

/** Runs one floor measurement: relay, subscriber, then publisher; stops all three. */
export async function runFloor(options: Omit<Options, "port">, timeoutMs: number): Promise<FloorResult> {
  const script = join(ROOT, "scripts", "bench", "floor.ts");
  const spawn = (role: string, extra: Partial<Options> = {}) =>
    new Child(`floor ${role}`, [process.execPath, script, role, JSON.stringify({ ...options, ...extra })]);
  const relay = spawn("relay");
  const children = [relay];
  try {
    return await withTimeout(
      (async () => {
        const [publisherPort, subscriberPort] = (await relay.waitFor("ready")).split(" ").map(Number);
        const sub = spawn("sub", { port: subscriberPort });
        children.push(sub);
        await sub.waitFor("ready");
        const pub = spawn("pub", { port: publisherPort });
        children.push(pub);
        const result = await sub.waitJson<{ latency: Latency | null; cpuS: number }>("result");
        const pubCpu = Number(await pub.waitFor("cpu"));
        relay.proc.kill("SIGTERM");
        const relayCpu = Number(await relay.waitFor("cpu"));
        if (!result.latency) throw new Error("the floor subscriber measured no message");
        return { latency: result.latency, cpuS: result.cpuS + pubCpu + relayCpu };
      })(),
      timeoutMs,
      `the floor run did not finish within ${timeoutMs / 1000} s`,
    );
  } finally {
    await Promise.all(children.map((child) => child.stop()));
  }
}

const cpuSeconds = () => {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e6;
};

function relay(): void {
  let subscriber: { write(data: Uint8Array): number } | null = null;
  const publishers = Bun.listen({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      data(socket, chunk) {
        subscriber?.write(chunk);
        socket.write(ONE_BYTE);
      },
    },
  });
  const subscribers = Bun.listen({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(socket) {
        subscriber = socket;
      },
      data() {},
    },
  });
  process.once("SIGTERM", () => {
    process.stdout.write(`cpu ${cpuSeconds()}\n`);
    process.exit(0);
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
    const tick = () => {
      const due = Math.min(total, Math.floor((now() - firstAt) * options.rate / 1000) + 1);
      let lines = "";
      for (; sent < due; sent++) lines += `${sent} ${now()} ${PADDING}\n`;
      if (lines) socket.write(lines);
      if (sent < total) setTimeout(tick, 1);
      else {
        process.stdout.write(`cpu ${cpuSeconds()}\n`);
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
      const result = { latency: percentiles(latency, seen, skip, count), cpuS: cpuSeconds() };
      process.stdout.write(`result ${JSON.stringify(result)}\n`);
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
