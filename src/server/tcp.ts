/**
 * Bun.listen glue: socket events → Session. The only file of the broker that touches sockets.
 */
import type { Socket, TCPSocketListener } from "bun";
import type { Broker } from "./broker.ts";
import { type Connection, Session } from "./session.ts";

/** A client that has not said hello within this time is disconnected. */
export const HANDSHAKE_TIMEOUT_MS = 5_000;

interface SocketData {
  session: Session;
  handshake: ReturnType<typeof setTimeout> | null;
}

export function listen(broker: Broker, hostname: string, port: number): TCPSocketListener<SocketData> {
  return Bun.listen<SocketData>({
    hostname,
    port,
    socket: {
      open(socket) {
        const session = new Session(broker, connectionOf(socket));
        broker.sessions.add(session);
        const handshake = setTimeout(() => {
          if (session.state === "hello") {
            broker.log.warn("socket", `remote=${socket.remoteAddress};no hello within ${HANDSHAKE_TIMEOUT_MS} ms;closing`);
            socket.end();
          }
        }, HANDSHAKE_TIMEOUT_MS);
        socket.data = { session, handshake };
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

function connectionOf(socket: Socket<SocketData>): Connection {
  return {
    write: (bytes) => socket.write(bytes),
    end: () => socket.end(),
    get remoteAddress() {
      return socket.remoteAddress;
    },
  };
}
