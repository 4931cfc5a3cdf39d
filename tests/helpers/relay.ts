/**
 * A TCP relay on 127.0.0.1 in front of a broker's port, for tests that need a link between two
 * processes to fail in a chosen way: `cut()` drops every link through it (the next connection
 * goes through again), `freeze()` keeps the links open but lets nothing through any more (a peer
 * that stopped answering: what was written is never delivered), `holdAfter(bytes)` lets a new
 * link carry only so many bytes of the broker's side (a transfer stopped halfway),
 * `holdAfterFrame(matches)` lets a new link carry the broker's frames up to the first one that
 * matches (a peer that stops answering at a chosen step), `down()` refuses every connection until
 * `open()`.
 */
import { connect, createServer, type Socket } from "node:net";
import { decode } from "../../src/protocol/cbor.ts";

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
  /**
   * Links opened from now on carry the broker's frames up to and including the first one
   * `matches` (decoded), and nothing of the broker's after it (the dialer's bytes still go
   * through). null: no such bound for new links.
   */
  holdAfterFrame(matches: ((frame: unknown) => boolean) | null): void;
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
  /** The frame after which the broker's side is held, and the bytes of a frame not complete yet. */
  watch: ((frame: unknown) => boolean) | null;
  partial: Uint8Array;
}

/** The complete frames at the start of `bytes` up to the first `watch` matches: how many bytes, whether it matched. */
function framesThrough(bytes: Uint8Array, watch: (frame: unknown) => boolean): { length: number; matched: boolean } {
  let at = 0;
  while (at + 4 <= bytes.length) {
    const size = ((bytes[at]! << 24) | (bytes[at + 1]! << 16) | (bytes[at + 2]! << 8) | bytes[at + 3]!) >>> 0;
    if (at + 4 + size > bytes.length) break;
    let frame: unknown = null;
    try {
      frame = decode(bytes.subarray(at + 4, at + 4 + size));
    } catch {
      // not CBOR: never a match
    }
    at += 4 + size;
    if (watch(frame)) return { length: at, matched: true };
  }
  return { length: at, matched: false };
}

/** A relay to `port` on 127.0.0.1. */
export async function startRelay(port: number): Promise<Relay> {
  const links: Link[] = [];
  let refusing = false;
  let bound: number | null = null;
  let frameBound: ((frame: unknown) => boolean) | null = null;
  let held = 0;
  const server = createServer((inbound) => {
    inbound.on("error", () => {});
    if (refusing) {
      inbound.destroy();
      return;
    }
    const outbound = connect(port, "127.0.0.1");
    outbound.on("error", () => {});
    const link: Link = { sockets: [inbound, outbound], frozen: false, allowance: bound ?? Infinity, watch: frameBound, partial: new Uint8Array(0) };
    links.push(link);
    inbound.on("data", (chunk: Uint8Array) => {
      if (!link.frozen) outbound.write(chunk);
    });
    outbound.on("data", (chunk: Uint8Array) => {
      if (link.frozen || link.allowance <= 0) return;
      if (link.watch) {
        const bytes = new Uint8Array(link.partial.length + chunk.length);
        bytes.set(link.partial);
        bytes.set(chunk, link.partial.length);
        const { length, matched } = framesThrough(bytes, link.watch);
        if (length > 0) inbound.write(bytes.subarray(0, length));
        link.partial = bytes.slice(length);
        if (matched) {
          link.allowance = 0;
          held++;
        }
        return;
      }
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
    holdAfterFrame(matches) {
      frameBound = matches;
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
