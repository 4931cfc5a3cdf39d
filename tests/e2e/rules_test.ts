/**
 * Rules end to end: what a client may read and write, unknown clients,
 * prefix clients, the three pattern levels, `!` exclusive ids, addId, reload, and acks bound to
 * the connection a delivery went to. One test per refusal, each asserting the exact code and a
 * message naming client, channel and direction.
 */
import { afterEach, expect, it } from "bun:test";
import { readdir } from "node:fs/promises";
import { Client, type KittenError } from "../../mod.ts";
import { encode, OP } from "../../src/protocol/mod.ts";
import { parseConfig } from "../../src/server/config/config.ts";
import {
  Cleanup,
  clientOptions,
  listenRecorder,
  type Received,
  recorder,
  rejection,
  startTestBroker,
  type TestBroker,
  waitFor,
} from "../helpers/broker.ts";
import { attacker, bystander } from "../helpers/security.ts";
import { hello } from "../helpers/wire.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

const BYSTANDER = { client: "bystander", read: ["by/v1/*"], write: ["by/v1/*"] };
const RULES = [
  { client: "app-*", read: ["orders/*"], write: ["orders/v1/*"] },
  { client: "audit-*", read: ["!invoice/v1/*"] },
  { client: "billing", write: ["invoice/v1/*"] },
  BYSTANDER,
];

function rulesBroker(rules: unknown[] = RULES, overrides: Record<string, unknown> = {}): TestBroker {
  return cleanup.broker({ rules, ...overrides });
}

/** Asserts a NOT_ALLOWED refusal naming client, channel and direction, in the message and details. */
function expectNotAllowed(error: KittenError | unknown, client: string, channel: string, direction: "read" | "write") {
  const e = error as KittenError;
  expect(e.code).toBe("NOT_ALLOWED");
  expect(e.message).toContain(`"${client}"`);
  expect(e.message).toContain(`"${channel}"`);
  expect(e.message).toContain(direction);
  expect(e.details).toEqual({ client, channel, direction });
}

/** Listens and returns the refusal: the handler's error and ready's rejection must agree. */
async function listenRefusal(mq: Client, channel: string | { endpoint: string; version: string; ids: string[] }) {
  const errors: unknown[] = [];
  const got: Received[] = [];
  const sub = mq.listen(channel, listenRecorder(got, errors));
  const error = await rejection(sub.ready);
  expect(errors).toEqual([error]);
  return error;
}

it("e2e: rules: no rules = open: any client reads and writes any channel", async () => {
  const broker = cleanup.broker();
  expect(broker.broker.rules.isOpen).toBe(true);
  const mq = await cleanup.client(broker, { clientId: "whoever-1" });
  const got: Received[] = [];
  await mq.consume("anything/v9/7", recorder(got)).ready;
  await mq.listen({ endpoint: "other", version: "v1", ids: ["*"] }, listenRecorder(got)).ready;
  await mq.send("anything/v9/7", "a");
  await mq.send("other/v1/x", "b");
  await waitFor(() => got.length === 2);
});

it("e2e: rules: listen without a read grant: the handler gets NOT_ALLOWED and ready rejects, naming client, channel and read", async () => {
  const broker = rulesBroker();
  const other = await bystander(cleanup, broker);
  const mq = await cleanup.client(broker, { clientId: "app-1" });
  const error = await listenRefusal(mq, "invoice/v1/1");
  expectNotAllowed(error, "app-1", "invoice/v1/1", "read");
  expect(error.message).toContain("listen");
  // consume is a read too
  const errors: unknown[] = [];
  const consumeError = await rejection(mq.consume("invoice/v1/2", recorder([], { errors })).ready);
  expectNotAllowed(consumeError, "app-1", "invoice/v1/2", "read");
  expect(errors).toHaveLength(1);
  // The connection stays usable: granted reads work.
  await mq.listen("orders/v1/1", listenRecorder([])).ready;
  await other.check();
});

it("e2e: rules: send without a write grant gets NOT_ALLOWED naming client, channel and write", async () => {
  const broker = rulesBroker();
  const other = await bystander(cleanup, broker);
  const mq = await cleanup.client(broker, { clientId: "app-2" });
  const error = await rejection(mq.send("orders/v2/1", { n: 1 })); // read orders/*, write only orders/v1/*
  expectNotAllowed(error, "app-2", "orders/v2/1", "write");
  expect(error.message).toContain("send");
  expect(broker.broker.queues.get("orders/v2")?.live ?? 0).toBe(0);
  await mq.send("orders/v1/1", { n: 2 }); // granted
  await other.check();
});

it("e2e: rules: read and write are separate: write-only cannot listen, read-only cannot send", async () => {
  const broker = rulesBroker([
    { client: "writer", write: ["x/v1/*"] },
    { client: "reader", read: ["x/v1/*"] },
  ]);
  const writer = await cleanup.client(broker, { clientId: "writer" });
  const reader = await cleanup.client(broker, { clientId: "reader" });
  expectNotAllowed(await listenRefusal(writer, "x/v1/1"), "writer", "x/v1/1", "read");
  expectNotAllowed(await rejection(reader.send("x/v1/1", "nope")), "reader", "x/v1/1", "write");
  const got: Received[] = [];
  await reader.listen("x/v1/1", listenRecorder(got)).ready;
  await writer.send("x/v1/1", "yes");
  await waitFor(() => got.length === 1);
  expect(got[0]!.message).toBe("yes");
});

it("e2e: rules: an unpinned id no rule's client matches gets UNKNOWN_CLIENT and nothing is pinned", async () => {
  const broker = rulesBroker();
  const other = await bystander(cleanup, broker);
  const mq = cleanup.add(new Client());
  const error = await rejection(mq.connect(clientOptions(broker, { clientId: "stranger" })));
  expect(error.code).toBe("UNKNOWN_CLIENT");
  expect(error.message).toContain(`"stranger"`);
  expect(mq.isConnected()).toBe(false);
  expect(await readdir(broker.broker.config.registeredClientsPath)).toEqual(["bystander.pub"]);
  await other.check();
});

it("e2e: rules: a pinned id that no rule matches any more still connects, and may do nothing", async () => {
  const broker = cleanup.broker();
  const early = await cleanup.client(broker, { clientId: "old-timer" }); // pinned while open
  await early.disconnect();
  broker.broker.reload(parseConfig({
    isManagementInterface: false,
    registeredClientsPath: broker.broker.config.registeredClientsPath,
    socketServer: { port: 0, host: "127.0.0.1" },
    rules: RULES,
  }));
  const mq = await cleanup.client(broker, { clientId: "old-timer" });
  expectNotAllowed(await rejection(mq.send("orders/v1/1", 1)), "old-timer", "orders/v1/1", "write");
  expectNotAllowed(await listenRefusal(mq, "orders/v1/1"), "old-timer", "orders/v1/1", "read");
});

it("e2e: rules: a prefix rule easilys-* auto-accepts easilys-42, and only ids with that prefix", async () => {
  const broker = rulesBroker([{ client: "easilys-*", read: ["e/*"], write: ["e/*"] }]);
  const mq = await cleanup.client(broker, { clientId: "easilys-42" });
  const got: Received[] = [];
  await mq.listen("e/v1/1", listenRecorder(got)).ready;
  await mq.send("e/v1/1", "hi");
  await waitFor(() => got.length === 1);
  for (const id of ["easilys", "xeasilys-1", "easily-1", "Easilys-1"]) {
    const refused = cleanup.add(new Client());
    const error = await rejection(refused.connect(clientOptions(broker, { clientId: id })));
    expect(error.code).toBe("UNKNOWN_CLIENT");
    expect(error.message).toContain(`"${id}"`);
  }
});

it("e2e: rules: patterns e/v/id, e/v/* and e/* allow what they should and nothing else", async () => {
  const broker = rulesBroker([
    { client: "c-id", read: ["e/v1/a"], write: ["e/v1/a"] },
    { client: "c-ver", read: ["e/v1/*"], write: ["e/v1/*"] },
    { client: "c-end", read: ["e/*"], write: ["e/*"] },
  ]);
  const cases: { client: string; allowed: string[]; refused: string[] }[] = [
    { client: "c-id", allowed: ["e/v1/a"], refused: ["e/v1/b", "e/v1/*", "e/v2/a", "f/v1/a", "ee/v1/a"] },
    { client: "c-ver", allowed: ["e/v1/a", "e/v1/b", "e/v1/*"], refused: ["e/v2/a", "e/v2/*", "f/v1/a", "e/v10/a"] },
    { client: "c-end", allowed: ["e/v1/a", "e/v2/x", "e/v1/*", "e/v3/*"], refused: ["f/v1/a", "ee/v1/a", "f/v1/*"] },
  ];
  for (const { client, allowed, refused } of cases) {
    const mq = await cleanup.client(broker, { clientId: client });
    for (const channel of allowed) {
      await mq.listen(channel, listenRecorder([])).ready;
      await mq.send(channel, `${client} -> ${channel}`);
    }
    for (const channel of refused) {
      expectNotAllowed(await listenRefusal(mq, channel), client, channel, "read");
      expectNotAllowed(await rejection(mq.send(channel, 1)), client, channel, "write");
    }
  }
});

it("e2e: rules: listening on e/v/* needs e/v/* or e/*; a grant of every single id used so far is not enough", async () => {
  const broker = rulesBroker([{ client: "ids", read: ["e/v1/a", "e/v1/b"] }]);
  const mq = await cleanup.client(broker, { clientId: "ids" });
  await mq.listen({ endpoint: "e", version: "v1", ids: ["a", "b"] }, listenRecorder([])).ready;
  const error = await listenRefusal(mq, { endpoint: "e", version: "v1", ids: ["*"] });
  expectNotAllowed(error, "ids", "e/v1/*", "read");
  // One refused id refuses the whole registration.
  expectNotAllowed(await listenRefusal(mq, { endpoint: "e", version: "v1", ids: ["a", "c"] }), "ids", "e/v1/c", "read");
});

it("e2e: rules: ! exclusive: the first listener owns an id, another client gets EXCLUSIVE_TAKEN until the owner is gone", async () => {
  const broker = rulesBroker();
  const other = await bystander(cleanup, broker);
  const owner = await cleanup.client(broker, { clientId: "audit-1" });
  const rival = await cleanup.client(broker, { clientId: "audit-2" });
  const ownerGot: Received[] = [];
  await owner.listen("invoice/v1/42", listenRecorder(ownerGot)).ready;

  const taken = await listenRefusal(rival, "invoice/v1/42");
  expect(taken.code).toBe("EXCLUSIVE_TAKEN");
  expect(taken.message).toContain(`"audit-2"`);
  expect(taken.message).toContain(`"invoice/v1/42"`);
  expect(taken.message).toContain("!invoice/v1/*");
  expect(taken.message).not.toContain("audit-1"); // the owner is not disclosed to the rival
  expect((taken.details as Record<string, unknown>).direction).toBe("read");
  // consume is refused the same way; other ids are free.
  expect((await rejection(rival.consume("invoice/v1/42", recorder([])).ready)).code).toBe("EXCLUSIVE_TAKEN");
  await rival.listen("invoice/v1/43", listenRecorder([])).ready;

  // Messages for 42 go to the owner only.
  const billing = await cleanup.client(broker, { clientId: "billing" });
  await billing.send("invoice/v1/42", "for the owner");
  await waitFor(() => ownerGot.length === 1);

  // The owner leaves: the rival can take the id.
  await owner.disconnect();
  const rivalGot: Received[] = [];
  await waitFor(() => broker.broker.exclusive.ownerOf("invoice/v1", "42", "audit-2") === undefined);
  const rivalSub = rival.listen("invoice/v1/42", listenRecorder(rivalGot));
  await rivalSub.ready;
  await billing.send("invoice/v1/42", "for the rival");
  await waitFor(() => rivalGot.length === 1);

  // The owner reconnects: refused while the rival holds it, accepted once it is free again.
  const back = await cleanup.client(broker, { clientId: "audit-1" });
  expect((await listenRefusal(back, "invoice/v1/42")).code).toBe("EXCLUSIVE_TAKEN");
  await rivalSub.close();
  const backGot: Received[] = [];
  await back.listen("invoice/v1/42", listenRecorder(backGot)).ready;
  await billing.send("invoice/v1/42", "back to the first owner");
  await waitFor(() => backGot.length === 1);
  expect(rivalGot).toHaveLength(1);
  await other.check();
});

it("e2e: rules: ! exclusive: an owner that reconnects on its own (broker restart) takes its id back", async () => {
  const broker = rulesBroker();
  const owner = await cleanup.client(broker, { clientId: "audit-1" });
  const got: Received[] = [];
  const errors: unknown[] = [];
  await owner.listen("invoice/v1/7", listenRecorder(got, errors)).ready;
  // Same port, same rules, same pins: the client reconnects and registers again.
  const port = broker.port;
  const pins = broker.broker.config.registeredClientsPath;
  await broker.stop();
  const again = cleanup.add(startTestBroker({ rules: RULES, registeredClientsPath: pins, socketServer: { port } }));
  await waitFor(() => again.broker.exclusive.size === 1, 2500);
  const billing = await cleanup.client(again, { clientId: "billing" });
  await billing.send("invoice/v1/7", "after restart");
  await waitFor(() => got.length === 1);
  expect(errors).toEqual([]);
});

it("e2e: rules: addId is checked like listen: NOT_ALLOWED through its promise and its callback", async () => {
  const broker = rulesBroker([{ client: "c", read: ["e/v1/a", "e/v1/b"] }]);
  const mq = await cleanup.client(broker, { clientId: "c" });
  const sub = mq.listen("e/v1/a", listenRecorder([]));
  await sub.ready;
  await sub.addId("b");
  const error = await rejection(sub.addId("z"));
  expectNotAllowed(error, "c", "e/v1/z", "read");
  expect(error.message).toContain("add");
  const viaCallback = await new Promise<KittenError | null>((resolve) => {
    sub.addId("y", (err) => resolve(err)).catch(() => {});
  });
  expectNotAllowed(viaCallback, "c", "e/v1/y", "read");
  expectNotAllowed(await rejection(sub.addId("*")), "c", "e/v1/*", "read");
});

it("e2e: rules: addId of an id another client owns through ! gets EXCLUSIVE_TAKEN", async () => {
  const broker = rulesBroker();
  const owner = await cleanup.client(broker, { clientId: "audit-1" });
  const rival = await cleanup.client(broker, { clientId: "audit-2" });
  await owner.listen("invoice/v1/42", listenRecorder([])).ready;
  const sub = rival.listen("invoice/v1/1", listenRecorder([]));
  await sub.ready;
  const error = await rejection(sub.addId("42"));
  expect(error.code).toBe("EXCLUSIVE_TAKEN");
  expect(error.message).toContain(`"audit-2"`);
  expect(error.message).toContain("invoice/v1/42");
  const viaCallback = await new Promise<KittenError | null>((resolve) => {
    sub.addId(["43", "42"], (err) => resolve(err)).catch(() => {});
  });
  expect(viaCallback?.code).toBe("EXCLUSIVE_TAKEN");
  // All or nothing: 43 was not claimed by the refused request.
  expect(broker.broker.exclusive.ownerOf("invoice/v1", "43", "audit-1")).toBeUndefined();
  // addId of the same client's own id on another registration is fine.
  const second = owner.listen("invoice/v1/9", listenRecorder([]));
  await second.ready;
  await second.addId("42");
});

it("e2e: rules: ! exclusive: an id repeated in one LISTEN is released when the registration goes", async () => {
  const broker = rulesBroker();
  const wire = await attacker(cleanup, broker);
  await hello(wire, "audit-1");
  wire.send([OP.LISTEN, 1, 1, "invoice", "v1", ["7", "7"], null]);
  await wire.expect(OP.OK);
  wire.send([OP.UNSUBSCRIBE, 2, 1]);
  await wire.expect(OP.OK);
  expect(broker.broker.exclusive.size).toBe(0);
  const rival = await cleanup.client(broker, { clientId: "audit-2" });
  await rival.listen("invoice/v1/7", listenRecorder([])).ready;
});

it("e2e: rules: ! exclusive: an id repeated in one addId is released when the subscription closes", async () => {
  const broker = rulesBroker();
  const owner = await cleanup.client(broker, { clientId: "audit-3" });
  const sub = owner.listen("invoice/v1/1", listenRecorder([]));
  await sub.ready;
  await sub.addId(["8", "8"]);
  await sub.close();
  expect(broker.broker.exclusive.size).toBe(0);
  const rival = await cleanup.client(broker, { clientId: "audit-2" });
  await rival.listen("invoice/v1/8", listenRecorder([])).ready;
});

it("e2e: rules: a refused addId is not registered again after a reconnect (the granted ids keep working)", async () => {
  const rules = [{ client: "c", read: ["e/v1/a"] }, { client: "w", write: ["e/v1/*"] }];
  const broker = rulesBroker(rules);
  const mq = await cleanup.client(broker, { clientId: "c" });
  const got: Received[] = [];
  const errors: unknown[] = [];
  const sub = mq.listen("e/v1/a", listenRecorder(got, errors));
  await sub.ready;
  expect((await rejection(sub.addId("z"))).code).toBe("NOT_ALLOWED");
  // The broker restarts on the same port: the client registers its subscription again.
  const port = broker.port;
  const pins = broker.broker.config.registeredClientsPath;
  await broker.stop();
  const again = cleanup.add(startTestBroker({ rules, registeredClientsPath: pins, socketServer: { port } }));
  const writer = await cleanup.client(again, { clientId: "w" });
  await waitFor(() => mq.isConnected(), 2500);
  // The re-registration went first on the new link: a request after it is answered after it (this
  // send is refused, c may only read).
  expect((await rejection(mq.send("e/v1/a", "barrier"))).code).toBe("NOT_ALLOWED");
  await writer.send("e/v1/a", "after reconnect");
  await waitFor(() => got.length === 1 || errors.length > 0);
  expect(errors).toEqual([]);
  expect(got.map((r) => r.message)).toEqual(["after reconnect"]);
});

it("e2e: rules: a reload changes what an already connected client may do", async () => {
  const broker = rulesBroker();
  const mq = await cleanup.client(broker, { clientId: "app-7" });
  expectNotAllowed(await rejection(mq.send("shipping/v1/1", 1)), "app-7", "shipping/v1/1", "write");
  await mq.send("orders/v1/1", "allowed before");

  broker.broker.reload(parseConfig({
    isManagementInterface: false,
    registeredClientsPath: broker.broker.config.registeredClientsPath,
    socketServer: { port: 0, host: "127.0.0.1" },
    rules: [{ client: "app-*", read: ["shipping/*"], write: ["shipping/v1/*"] }],
  }));
  await mq.send("shipping/v1/1", "allowed after");
  expectNotAllowed(await rejection(mq.send("orders/v1/1", 2)), "app-7", "orders/v1/1", "write");
  await mq.listen("shipping/v1/1", listenRecorder([])).ready;
  expectNotAllowed(await listenRefusal(mq, "orders/v1/1"), "app-7", "orders/v1/1", "read");

  // Back to no rules: open again for the same connection.
  broker.broker.reload(parseConfig({
    isManagementInterface: false,
    registeredClientsPath: broker.broker.config.registeredClientsPath,
    socketServer: { port: 0, host: "127.0.0.1" },
  }));
  await mq.send("orders/v1/1", "open again");
});

it("e2e: rules: an ACK from a connection the delivery did not go to has no effect; the owner's ACK settles it", async () => {
  const broker = cleanup.broker({ requeueInterval: 0.3 });
  const owner = await attacker(cleanup, broker);
  await hello(owner, "ack-owner");
  owner.send([OP.CONSUME, 1, 1, "acks", "v1", ["1"], null]);
  await owner.expect(OP.OK);
  // The intruder: same client id (same key), its own sub 1 on another queue, and one with no sub.
  const intruder = await attacker(cleanup, broker);
  await hello(intruder, "ack-owner");
  intruder.send([OP.CONSUME, 1, 1, "elsewhere", "v1", ["1"], null]);
  await intruder.expect(OP.OK);
  const stranger = await attacker(cleanup, broker);
  await hello(stranger, "ack-stranger");

  const producer = await cleanup.client(broker);
  await producer.send("acks/v1/1", "precious");
  const first = await owner.expect(OP.DELIVER);
  const tag = first[2] as number;
  const queue = broker.broker.queues.get("acks/v1")!;
  intruder.send([OP.ACK, 1, [tag]]);
  intruder.send([OP.NACK, 1, tag, 0]);
  stranger.send([OP.ACK, 1, [tag]]);
  stranger.send([OP.NACK, 1, tag, 0]);
  intruder.send([OP.PING, 1]); // round trips: the acks above were read by now
  await intruder.expect(OP.PONG);
  stranger.send([OP.PING, 1]);
  await stranger.expect(OP.PONG);
  expect(queue.counters.acked).toBe(0);
  expect(queue.counters.nacked).toBe(0);
  expect(queue.depth().inflight).toBe(1);

  // Unacked, it comes back to the owner after requeueInterval (0.3 s).
  const second = await owner.expect(OP.DELIVER, 1500);
  expect(second[3]).toBe(first[3]); // same message id
  expect(second[5]).toBe(1); // nbRequeues
  owner.send([OP.ACK, 1, [second[2] as number]]);
  await waitFor(() => queue.counters.acked === 1);
  expect(queue.live).toBe(0);
  expect(intruder.buffered.filter((f) => f[0] === OP.DELIVER)).toEqual([]);
});

it("e2e: rules: a send refused by the rules is never delivered (raw wire, answered with its ref)", async () => {
  const broker = rulesBroker();
  const reader = await cleanup.client(broker, { clientId: "app-9" });
  const got: Received[] = [];
  await reader.listen("orders/v2/1", listenRecorder(got)).ready;
  const wire = await attacker(cleanup, broker);
  await hello(wire, "app-10");
  wire.send([OP.SEND, 77, "orders/v2/1", "m-1", encode("forbidden")]);
  const error = await wire.expect(OP.ERROR);
  expect(error.slice(0, 3)).toEqual([OP.ERROR, 77, "NOT_ALLOWED"]);
  expect(error[4]).toEqual({ client: "app-10", channel: "orders/v2/1", direction: "write" });
  wire.send([OP.PING, 78]);
  await wire.expect(OP.PONG); // not fatal
  // A round trip on the reader's link: a delivery written before its answer would have come first.
  await reader.send("orders/v1/1", "barrier");
  expect(got).toEqual([]);
});
