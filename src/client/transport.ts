/**
 * The transport seam: a byte stream to one broker. The implementation uses `node:net` and
 * `node:tls`, which Bun, Deno and Node all provide, so the client runs unchanged on each.
 */
import { connect as netConnect, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";

export interface TransportHandlers {
  open(): void;
  data(chunk: Uint8Array): void;
  /** Called once, whether the connection failed, was refused or was closed. */
  close(error: Error | null): void;
}

export interface Transport {
  write(bytes: Uint8Array): void;
  close(): void;
}

/** TLS towards the brokers: `ca` (PEM) trusts a private or self-signed certificate. */
export interface TlsOptions {
  ca?: string | string[];
  /** Host name the certificate must carry, when it differs from the host string's. */
  servername?: string;
  /** Default true. Turning it off accepts any certificate: only for tests. */
  rejectUnauthorized?: boolean;
}

export type Dial = (host: string, port: number, tls: TlsOptions | null, handlers: TransportHandlers) => Transport;

export const dialTcp: Dial = (host, port, tls, handlers) => {
  const socket: Socket = tls
    ? tlsConnect({ host, port, ca: tls.ca, servername: tls.servername, rejectUnauthorized: tls.rejectUnauthorized ?? true })
    : netConnect({ host, port });
  socket.setNoDelay(true);
  let failure: Error | null = null;
  let closed = false;
  if (tls) socket.on("secureConnect", () => handlers.open());
  socket.on("connect", () => {
    if (reachedItself(socket)) {
      // Held, the socket would keep the broker from listening on its own port: let go at once.
      failure = new Error(`connect ECONNREFUSED ${host}:${port}: the connection reached itself (nobody listens there)`);
      socket.destroy();
    } else if (!tls) handlers.open();
  });
  socket.on("data", (chunk: Uint8Array) => handlers.data(chunk));
  socket.on("error", (error: Error) => {
    failure = error;
  });
  socket.on("close", () => {
    if (closed) return;
    closed = true;
    handlers.close(failure);
  });
  return {
    write(bytes) {
      if (!socket.destroyed) socket.write(bytes);
    },
    close() {
      socket.destroy();
    },
  };
};

/**
 * True for a TCP connection to the same host and port it came from: connecting to a local port
 * nobody listens on, the operating system may pick that very port as the source and join the
 * socket to itself (a "simultaneous open"). It then holds the port a broker restarting there needs.
 */
export function reachedItself(socket: Socket): boolean {
  return socket.localPort !== undefined && socket.localPort === socket.remotePort && socket.localAddress === socket.remoteAddress;
}
