/**
 * A TCP relay on 127.0.0.1 in front of a broker's port, for tests that need a link between two
 * processes to fail in a chosen way: `cut()` drops every link through it (the next connection
 * goes through again), `freeze()` keeps the links open but lets nothing through any more (a peer
 * that stopped answering: what was written is never delivered), `holdAfter(bytes)` lets a new
 * link carry only so many bytes of the broker's side (a transfer stopped halfway), `down()`
 * refuses every connection until `open()`.
 */
import { connect, createServer, type Socket } from "node:net";

export interface Relay {
  readonly port: number;
  /** `127.0.0.1:<relay port>@<serviceId>`: what a client or a peer dials instead of the broker. */
  host(serviceId: string): string;
  /** Drops every link through the relay now. */
  cut(): void;
  /** From now on, bytes of the links open now are dropped in both directions (never delivered). */
  freeze(): void;
  /**
   * Links opened from now on deliver at most `bytes` bytes from the broker to the dialer; what
   * follows is dropped (the dialer's bytes still go through). null: no bound for new links.
   */
  holdAfter(bytes: number | null): void;
  /** Links that reached their `holdAfter` bound so far. */
  readonly held: number;
  /** New connections are closed at once (the links open now stay as they are). */
  down(): void;
  /** New connections go through again. */
  open(): void;
  /** Cuts every link and stops listening. */
  close(): Promise<void>;
}

interface Link {
  sockets: [Socket, Socket];
  frozen: boolean;
  /** Bytes from the broker still allowed through (Infinity: no bound). */
  allowance: number;
}

/** A relay to `port` on 127.0.0.1. */
export async function startRelay(port: number): Promise<Relay> {
  const links: Link[] = [];
  let refusing = false;
  let bound: number | null = null;
  let held = 0;
  const server = createServer((inbound) => {
    inbound.on("error", () => {});
    if (refusing) {
      inbound.destroy();
      return;
    }
    const outbound = connect(port, "127.0.0.1");
    outbound.on("error", () => {});
    const link: Link = { sockets: [inbound, outbound], frozen: false, allowance: bound ?? Infinity };
    links.push(link);
    inbound.on("data", (chunk: Uint8Array) => {
      if (!link.frozen) outbound.write(chunk);
    });
    outbound.on("data", (chunk: Uint8Array) => {
      if (link.frozen || link.allowance <= 0) return;
      const through = chunk.length <= link.allowance ? chunk : chunk.subarray(0, link.allowance);
      link.allowance -= through.length;
      if (link.allowance === 0) held++;
      inbound.write(through);
    });
    inbound.on("close", () => outbound.destroy());
    outbound.on("close", () => inbound.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const relayPort = (server.address() as { port: number }).port;
  const cut = () => {
    for (const { sockets } of links.splice(0)) for (const socket of sockets) socket.destroy();
  };
  return {
    port: relayPort,
    host: (serviceId) => `127.0.0.1:${relayPort}@${serviceId}`,
    cut,
    freeze() {
      for (const link of links) link.frozen = true;
    },
    holdAfter(bytes) {
      bound = bytes;
    },
    get held() {
      return held;
    },
    down() {
      refusing = true;
    },
    open() {
      refusing = false;
    },
    close() {
      cut();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
