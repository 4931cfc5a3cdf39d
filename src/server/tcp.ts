/**
 * Bun.listen glue: socket events → Session. The only file of the broker that touches sockets.
 * It also enforces the per-connection limits that need a socket: the connection cap and the
 * handshake deadline.
 */
import type { Socket, TCPSocketListener } from "bun";
import { encode, FrameBatch, OP } from "../protocol/mod.ts";
import type { Broker } from "./broker.ts";
import { type Connection, Session } from "./session.ts";

interface SocketData {
  session: Session;
  handshake: ReturnType<typeof setTimeout> | null;
}

export function listen(broker: Broker): TCPSocketListener<SocketData> {
  const { host, port, tls } = broker.config.socketServer;
  return Bun.listen<SocketData>({
    hostname: host,
    port,
    ...(tls ? { tls: { cert: Bun.file(tls.cert), key: Bun.file(tls.key) } } : {}),
    socket: {
      open(socket) {
        const limits = broker.config.socketServer;
        const session = new Session(broker, connectionOf(socket));
        socket.data = { session, handshake: null };
        if (broker.sessions.size >= limits.maxConnections) {
          broker.log.warn("socket", `remote=${socket.remoteAddress};maxConnections ${limits.maxConnections} reached;refused`);
          socket.end(refusal(`Cannot accept a connection: the broker holds maxConnections ${limits.maxConnections}`));
          return;
        }
        broker.sessions.add(session);
        socket.data.handshake = setTimeout(() => {
          if (session.state === "open" || session.state === "closed") return;
          broker.log.warn("socket", `remote=${socket.remoteAddress};not authenticated within ${limits.handshakeTimeoutMs} ms;closing`);
          socket.end();
        }, limits.handshakeTimeoutMs);
      },
      data(socket, chunk) {
        socket.data.session.receive(chunk);
        broker.flush();
      },
      drain(socket) {
        socket.data.session.drain();
      },
      close(socket) {
        if (socket.data.handshake) clearTimeout(socket.data.handshake);
        socket.data.session.closed();
      },
      error(socket, error) {
        broker.log.warn("socket", `remote=${socket.remoteAddress};error=${error.message}`);
      },
    },
  });
}

function refusal(message: string): Uint8Array {
  const batch = new FrameBatch(256);
  batch.push(encode([OP.ERROR, null, "TOO_MANY_CONNECTIONS", message]));
  return batch.take();
}

function connectionOf(socket: Socket<SocketData>): Connection {
  return {
    write: (bytes) => socket.write(bytes),
    end: () => socket.end(),
    get remoteAddress() {
      return socket.remoteAddress;
    },
  };
}
