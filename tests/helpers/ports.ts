/**
 * A free port on 127.0.0.1, for tests and for the benchmark (which must not load the client):
 * brokers that must know each other's address before they start.
 *
 * Such a port is free when it is chosen and taken later, when its broker starts. Meanwhile any
 * outgoing connection may be given it as its source port, if it lies in the kernel's range for
 * those (`ip_local_port_range`): a client retrying a broker not started yet may even join itself
 * on it. The broker then cannot listen. So the port is chosen outside that range where the range
 * can be read (Linux), and listening on port 0 elsewhere.
 */
import { readFileSync } from "node:fs";
import { createServer } from "node:net";

/** Below this, ports are left to well-known services. */
const LOWEST = 10_000;
const HIGHEST = 65_535;
/** Ports handed out by this process: two brokers of one test never get the same. */
const handedOut = new Set<number>();

/** A port that was free a moment ago, outside the ephemeral range when there is room for it. */
export async function freePort(): Promise<number> {
  const range = ephemeralRange();
  const candidates = range === null ? 0 : Math.max(0, range[0] - LOWEST) + Math.max(0, HIGHEST - range[1]);
  for (let attempt = 0; candidates > 0 && attempt < 100; attempt++) {
    const pick = Math.floor(Math.random() * candidates);
    const below = Math.max(0, range![0] - LOWEST);
    const port = pick < below ? LOWEST + pick : range![1] + 1 + (pick - below);
    if (handedOut.has(port)) continue;
    const free = await listenAndClose(port).catch(() => null); // taken: another pick
    if (free === null) continue;
    handedOut.add(free);
    return free;
  }
  return listenAndClose(0);
}

/** Listens on `port` (0: any), reads which it got, closes. */
function listenAndClose(port: number): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => {
      const address = server.address();
      const bound = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(bound));
    });
  });
}

/** The kernel's range of source ports for outgoing connections, or null where it cannot be read. */
function ephemeralRange(): [number, number] | null {
  try {
    const [low, high] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
    return Number.isInteger(low) && Number.isInteger(high) ? [low!, high!] : null;
  } catch {
    return null;
  }
}
