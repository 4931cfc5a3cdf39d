/**
 * Bun.listen glue: socket events → Session. The only file of the broker that touches sockets.
 * It also enforces the per-connection limits that need a socket: the connection cap and the
 * handshake deadline.
 */
import type { Socket, TCPSocketListener } from "bun";
import { encode, type ErrorCode, FrameBatch, OP } from "../protocol/mod.ts";
import type { Broker } from "./broker.ts";
import type { HandshakeBudget } from "./handshake.ts";
import type { Connection } from "./outbox.ts";
import { ReadTurns } from "./read_turns.ts";
import { Session } from "./session.ts";

interface SocketData {
  session: Session;
  /** Its reads, which a long one makes wait for the next turn of the event loop (read_turns.ts). */
  reads: ReadTurns;
  handshake: ReturnType<typeof setTimeout> | null;
  /** Refused (connection cap): its input is discarded until it closes. */
  refused: boolean;
}

/** How long a refused connection may stay to read its refusal before it is closed. */
const REFUSAL_LINGER_MS = 1000;

export function listen(broker: Broker): TCPSocketListener<SocketData> {
  const { host, port, tls } = broker.config.socketServer;
  const handshakeBudget: HandshakeBudget = { held: 0 };
  /** Socket callbacks never throw into Bun: a bug is logged, and the broker keeps serving the others. */
  const guarded = (socket: Socket<SocketData>, what: string, work: () => void): void => {
    try {
      work();
    } catch (error) {
      broker.log.failure("socket", `remote=${socket.remoteAddress};${what} failed`, error);
    }
  };
  return Bun.listen<SocketData>({
    hostname: host,
    port,
    ...(tls ? { tls: { cert: Bun.file(tls.cert), key: Bun.file(tls.key) } } : {}),
    socket: {
      open(socket) {
        const limits = broker.config.socketServer;
        const reads = new ReadTurns(socket);
        const session = new Session(broker, connectionOf(socket, reads), handshakeBudget);
        socket.data = { session, reads, handshake: null, refused: false };
        if (broker.sessions.size >= limits.maxConnections) {
          broker.log.warn("socket", `remote=${socket.remoteAddress};maxConnections ${limits.maxConnections} reached;refused`);
          // Closing with the client's hello still unread would reset the connection and lose the
          // refusal: write it, close our side only, and drop what the client sends meanwhile.
          socket.data.refused = true;
          socket.write(errorFrame("TOO_MANY_CONNECTIONS", `Cannot accept a connection: the broker holds maxConnections ${limits.maxConnections}`));
          socket.shutdown(true);
          socket.data.handshake = setTimeout(() => socket.end(), REFUSAL_LINGER_MS);
          return;
        }
        broker.attach(session);
        socket.data.handshake = setTimeout(() => {
          if (session.state === "open" || session.state === "closed") return;
          broker.log.warn("socket", `remote=${socket.remoteAddress};not authenticated within ${limits.handshakeTimeoutMs} ms;closing`);
          socket.end(errorFrame("BAD_PROTOCOL", `Cannot keep the connection: not authenticated within ${limits.handshakeTimeoutMs} ms`));
        }, limits.handshakeTimeoutMs);
      },
      data(socket, chunk) {
        if (socket.data.refused) return;
        const startedAt = performance.now();
        guarded(socket, "data", () => {
          socket.data.session.receive(chunk);
          broker.flush();
        });
        socket.data.reads.after(startedAt);
      },
      drain(socket) {
        guarded(socket, "drain", () => socket.data.session.drain());
      },
      close(socket) {
        if (socket.data.handshake) clearTimeout(socket.data.handshake);
        guarded(socket, "close", () => socket.data.session.tearDown());
      },
      error(socket, error) {
        broker.log.warn("socket", `remote=${socket.remoteAddress};error=${error.message}`);
      },
    },
  });
}

function errorFrame(code: ErrorCode, message: string): Uint8Array {
  const batch = new FrameBatch(256);
  batch.push(encode([OP.ERROR, null, code, message]));
  return batch.take();
}

function connectionOf(socket: Socket<SocketData>, reads: ReadTurns): Connection {
  return {
    write: (bytes) => socket.write(bytes),
    end: () => socket.end(),
    pause: () => reads.pause(),
    resume: () => reads.resume(),
    terminate: () => socket.terminate(),
    get remoteAddress() {
      return socket.remoteAddress;
    },
  };
}
