/**
 * The TCP transport refuses a connection that reached itself: dialled to a local port nobody
 * listens on, the operating system may choose that same port as the source and join the socket
 * to itself, which then holds the port the broker restarting there must listen on.
 */
import { expect, it, mock } from "bun:test";
import * as net from "node:net";

const realConnect = net.connect;
/** Ports whose dials are made to come from the port they go to: a self-connection, every time. */
const selfDialled = new Set<number>();
mock.module("node:net", () => ({
  ...net,
  connect: (options: net.NetConnectOpts) => {
    const { port } = options as net.TcpNetConnectOpts;
    return realConnect(selfDialled.has(port) ? { ...options, localAddress: "127.0.0.1", localPort: port } as net.NetConnectOpts : options);
  },
}));
const { dialTcp, reachedItself } = await import("../../src/client/transport.ts");

/** A port nobody listens on now (a server took it, then let it go). */
async function idlePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

it("dialTcp closes a connection that reached itself, as refused, without opening it, and the port is free again", async () => {
  const port = await idlePort();
  selfDialled.add(port);
  let opened = false;
  const closed = Promise.withResolvers<Error | null>();
  dialTcp("127.0.0.1", port, null, { open: () => (opened = true), data: () => {}, close: closed.resolve });
  const error = await closed.promise;
  expect(opened).toBe(false);
  expect(error?.message).toBe(`connect ECONNREFUSED 127.0.0.1:${port}: the connection reached itself (nobody listens there)`);
  // A broker can listen there now.
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  server.close();
});

it("reachedItself() is false for a connection to a listening server", async () => {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  const socket = realConnect({ host: "127.0.0.1", port });
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  expect(reachedItself(socket)).toBe(false);
  socket.destroy();
  server.close();
});
