/**
 * A free port on 127.0.0.1, for tests and for the benchmark (which must not load the client):
 * brokers that must know each other's address before they start.
 */
import { createServer } from "node:net";

/** A port that was free a moment ago (listen on 0, read it, close). */
export function freePort(): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
