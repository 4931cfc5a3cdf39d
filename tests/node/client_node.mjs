/**
 * The client of the npm package under Node's own test runner, imported as a Node user does
 * (`import … from "kitten-mq"`, the package's ES module entry), against real brokers.
 */
import { afterEach, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { createRequire } from "node:module";
import kittenMq, { client, Client, KittenError, VERSION } from "kitten-mq";
import { cleanup, freePort, options, startBroker, tempDir, track, waitFor } from "./_helpers.mjs";

afterEach(cleanup);

test("node: the package's import and require entries are one copy, at the repository's version", () => {
  const required = createRequire(import.meta.url)("kitten-mq");
  assert.equal(required.KittenError, KittenError);
  assert.equal(required.client, client);
  assert.equal(kittenMq, required); // the default export is the CommonJS module itself
  const root = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));
  assert.equal(VERSION, root.version);
});

test("node: connect creates the key pair on first use; send, consume and ack", async () => {
  const broker = await startBroker();
  const keys = join(tempDir(), "keys");
  const mq = track(client());
  await mq.connect(options([broker.host], keys));
  assert.equal(mq.isConnected(), true);
  assert.ok(existsSync(join(keys, "client.pem")) && existsSync(join(keys, "client.pub")));
  assert.equal(statSync(join(keys, "client.pem")).mode & 0o777, 0o600);
  assert.match(readFileSync(join(keys, "client.pub"), "utf8"), /^-----BEGIN PUBLIC KEY-----/);

  const received = [];
  const subscription = mq.consume("orders/v1/*", (err, message, done, info) => {
    assert.equal(err, null);
    received.push({ message, id: info.channel.id, nbRequeues: info.nbRequeues });
    done();
  }, { prefetch: 50 });
  await subscription.ready;
  assert.equal(subscription.prefetch, 1); // asked 50: the broker's default prefetch caps it
  await mq.send("orders/v1/42", { total: 12.5 });
  await waitFor(() => received.length === 1);
  assert.deepEqual(received, [{ message: { total: 12.5 }, id: "42", nbRequeues: 0 }]);
});

test("node: listen fans out to every clientId; the callback API of the original", async () => {
  const broker = await startBroker();
  const keys = tempDir();
  const a = track(new Client());
  const b = track(new Client());
  await new Promise((resolve, reject) => a.connect(options([broker.host], keys), (err) => (err ? reject(err) : resolve())));
  await b.connect(options([broker.host], keys));
  const heard = [];
  const listener = (name) => (err, message, info) => {
    assert.equal(err, null);
    heard.push(`${name}:${info.channel.id}:${message}`);
  };
  await a.listen("news/v1/*", listener("a")).ready;
  await b.listen({ endpoint: "news", version: "v1", ids: ["fr"] }, listener("b")).ready;
  const sent = await new Promise((resolve) => a.send("news/v1/fr", "bonjour", resolve));
  assert.equal(sent, null);
  await waitFor(() => heard.length === 2);
  assert.deepEqual(heard.sort(), ["a:fr:bonjour", "b:fr:bonjour"]);
});

test("node: consume with nack (requeue now) and nack with a delay counts nbRequeues", async () => {
  const broker = await startBroker();
  const mq = track(client());
  await mq.connect(options([broker.host], tempDir()));
  const seen = [];
  let finished;
  const done = new Promise((resolve) => (finished = resolve));
  await mq.consume("jobs/v1/1", (err, message, ack, info) => {
    assert.equal(err, null);
    seen.push({ nbRequeues: info.nbRequeues, at: Date.now() });
    if (info.nbRequeues === 0) return ack(false); // requeue at once
    if (info.nbRequeues === 1) return ack(false, 0.2); // requeue after 0.2 s
    ack();
    finished();
  }).ready;
  await mq.send("jobs/v1/1", { job: 1 });
  await done;
  assert.deepEqual(seen.map((s) => s.nbRequeues), [0, 1, 2]);
  // The delay is a lower bound: the third delivery cannot come before 0.2 s after the second.
  assert.ok(seen[2].at - seen[1].at >= 190, `redelivered after ${seen[2].at - seen[1].at} ms`);
});

test("node: addId and removeId change what a subscription receives", async () => {
  const broker = await startBroker();
  const mq = track(client());
  await mq.connect(options([broker.host], tempDir()));
  const got = [];
  const sub = mq.listen({ endpoint: "ids", version: "v1", ids: ["a"] }, (err, message, info) => {
    assert.equal(err, null);
    got.push(`${info.channel.id}=${message}`);
  });
  await sub.ready;
  await new Promise((resolve, reject) => sub.addId("b", (err) => (err ? reject(err) : resolve())));
  await sub.removeId("a");
  await mq.send("ids/v1/a", 1); // nobody listens on a any more: it waits
  await mq.send("ids/v1/b", 2);
  // FIFO per queue: had the message for "a" been delivered, it would have come first.
  await waitFor(() => got.includes("b=2"));
  assert.deepEqual(got, ["b=2"]);
});

test("node: several hosts — the client connects to a master and a slave; the master delivers", async () => {
  const master = await startBroker({ serviceId: "broker-a" });
  const slave = await startBroker({ serviceId: "broker-b", isMaster: false });
  const keys = tempDir();
  const consumer = track(client());
  const publisher = track(client());
  await consumer.connect(options([master.host, slave.host], keys));
  await publisher.connect(options([master.host, slave.host], keys));
  await waitFor(() => consumer.status().every((h) => h.connected) && publisher.status().every((h) => h.connected));
  assert.deepEqual(
    consumer.status().map((h) => [h.host, h.role]),
    [[master.host, "master"], [slave.host, "slave"]],
  );
  const got = [];
  await consumer.consume("multi/v1/*", (err, message, done) => {
    assert.equal(err, null);
    got.push(message);
    done();
  }).ready;
  for (let n = 0; n < 5; n++) await publisher.send(`multi/v1/${n}`, { n });
  await waitFor(() => got.length === 5);
  assert.deepEqual(got.map((m) => m.n).sort(), [0, 1, 2, 3, 4]);
});

test("node: reconnect — a send made while the broker is down is confirmed once it is back, and handlers are registered again", async () => {
  const port = await freePort();
  const first = await startBroker({ socketServer: { port } });
  const keys = tempDir();
  const mq = track(client());
  let failures = 0;
  mq.on("error", () => failures++); // each failed reconnect attempt while the broker is down
  const events = [];
  mq.on("connect", () => events.push("connect"));
  mq.on("disconnect", () => events.push("disconnect"));
  await mq.connect(options([first.host], keys));
  const got = [];
  await mq.consume("back/v1/1", (err, message, done) => {
    assert.equal(err, null);
    got.push(message);
    done();
  }).ready;
  await first.stop();
  await waitFor(() => !mq.isConnected());

  let settled = false;
  const sent = mq.send("back/v1/1", { kept: true }).finally(() => (settled = true));
  const before = failures;
  await waitFor(() => failures >= before + 2, 5000, "two failed reconnect attempts after the send");
  assert.equal(settled, false);

  await startBroker({ socketServer: { port } });
  await sent;
  await waitFor(() => got.length === 1);
  assert.deepEqual(got, [{ kept: true }]);
  assert.deepEqual(events, ["connect", "disconnect", "connect"]);
});

test("node: a wrong broker token is refused with a coded KittenError (promise and callback)", async () => {
  const broker = await startBroker({ socketServer: { token: "s3cret" } });
  const keys = tempDir();
  const mq = track(client());
  mq.on("error", () => {});
  const error = await mq.connect(options([`${broker.host}#bad`], keys)).then(
    () => assert.fail("connect() resolved with a wrong token"),
    (e) => e,
  );
  assert.ok(error instanceof KittenError);
  assert.equal(error.code, "AUTH_FAILED");
  assert.equal(mq.isConnected(), false);

  const viaCallback = track(client());
  viaCallback.on("error", () => {});
  const refused = await new Promise((resolve) => viaCallback.connect(options([broker.host], keys), resolve).catch(() => {}));
  assert.equal(refused.code, "AUTH_FAILED");

  const good = track(client());
  await good.connect(options([`${broker.host}#s3cret`], keys));
  await good.send("auth/v1/1", "ok");
});

test("node: a refused send rejects with its code; a bad channel is BAD_CHANNEL", async () => {
  const broker = await startBroker();
  const mq = track(client());
  await mq.connect(options([broker.host], tempDir()));
  const error = await mq.send("*/v1/fr", 1).then(
    () => assert.fail("send to */v1 resolved"),
    (e) => e,
  );
  assert.ok(error instanceof KittenError);
  assert.equal(error.code, "BAD_CHANNEL");
});
