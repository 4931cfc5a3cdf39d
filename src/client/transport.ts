/**
 * The transport seam: a byte stream to one broker. The implementation uses `node:net`, which
 * Bun, Deno and Node all provide, so the client runs unchanged on each.
 */
import { connect as netConnect } from "node:net";

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

export type Dial = (host: string, port: number, handlers: TransportHandlers) => Transport;

export const dialTcp: Dial = (host, port, handlers) => {
  const socket = netConnect({ host, port });
  socket.setNoDelay(true);
  let failure: Error | null = null;
  let closed = false;
  socket.on("connect", () => handlers.open());
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
