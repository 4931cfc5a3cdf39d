import { expect, it } from "bun:test";
import { encode } from "../../src/protocol/cbor.ts";
import { frame } from "../../src/protocol/frame.ts";
import { type DeliverFields, writeDeliver } from "../../src/protocol/hot_ops.ts";
import { FrameBatch } from "../../src/protocol/frame.ts";
import { OP } from "../../src/protocol/ops.ts";
import { HostConnection } from "../../src/client/connection.ts";
import { defaultOptions, parseHost } from "../../src/client/options.ts";
import type { TransportHandlers } from "../../src/client/transport.ts";

/** A HostConnection over a fake transport, opened by a challenge and a welcome. */
async function opened() {
  const delivered: DeliverFields[] = [];
  let handlers: TransportHandlers | null = null;
  let closed = false;
  const connection = new HostConnection(
    parseHost("127.0.0.1:1@broker-1"),
    { ...defaultOptions(), clientId: "tester" },
    {
      open() {},
      close() {},
      refused() {},
      frame() {},
      deliver: (_, delivery) => void delivered.push(delivery),
      error(_, error) {
        throw error;
      },
    },
    (_host, _port, _tls, given) => {
      handlers = given;
      return { write() {}, close: () => void (closed = true) };
    },
    () => Promise.resolve([OP.AUTH, { token: "t", publicKey: "k" }]),
  );
  connection.start();
  handlers!.open();
  handlers!.data(frame(encode([OP.CHALLENGE, { nonce: "n", serviceId: "broker-1" }])));
  await Promise.resolve();
  handlers!.data(frame(encode([OP.WELCOME, { server: "broker-1", protocol: 1, role: "master", epoch: 0 }])));
  expect(connection.isOpen).toBe(true);
  return { connection, delivered, send: (bytes: Uint8Array) => handlers!.data(bytes), closed: () => closed };
}

const body = encode({ n: 1 });

it("HostConnection reads a DELIVER the fast reader does not expect (a newer broker's reason, an added element) with the generic decoder", async () => {
  const { delivered, send, closed } = await opened();
  const batch = new FrameBatch(64);
  writeDeliver(batch, 1, 7, "p.1", "42", 0, body, 5);
  send(batch.take());
  const origin = { reason: "expired-elsewhere", channel: "q/v1/42", messageId: "p.0", deliveries: 2 };
  send(frame(encode([OP.DELIVER, 1, 8, "p.2", "42", 1, body, 6, origin, "a field of a later protocol"])));
  expect(delivered.map((d) => [d.tag, d.messageId, d.nbRequeues])).toEqual([[7, "p.1", 0], [8, "p.2", 1]]);
  expect(delivered[1]!.deadLetter).toEqual(origin as never);
  expect(closed()).toBe(false);
});

it("HostConnection drops the link on a DELIVER that is not one (missing or mistyped fields)", async () => {
  const { delivered, send, closed } = await opened();
  send(frame(encode([OP.DELIVER, 1, "not a tag", "p.2", "42", 1, body, 6])));
  expect(delivered).toEqual([]);
  expect(closed()).toBe(true);
});
