/**
 * The package's CommonJS entry under Node's test runner: `require("kitten-mq")` and the
 * callback API exactly as the original's README uses it.
 */
const { afterEach, test } = require("node:test");
const assert = require("node:assert/strict");

const helpers = import("./_helpers.mjs");
afterEach(async () => (await helpers).cleanup());

test("node (require): the original's callbacks — connect, send, listen, consume, addId", async () => {
  const { options, startBroker, tempDir, track, waitFor } = await helpers;
  const broker = await startBroker();
  const kittenMQ = require("kitten-mq");
  const mq = track(kittenMQ.client());
  const connected = [];
  mq.connect(options([broker.host], tempDir()), (err) => connected.push(err));
  await waitFor(() => connected.length === 1);
  assert.deepEqual(connected, [null]);

  const heard = [];
  const consumed = [];
  const listener = mq.listen({ endpoint: "endpoint", version: "v1", ids: [120] }, (err, msg, info) => {
    assert.equal(err, null);
    heard.push(`${info.channel.id}:${msg}`);
  });
  mq.consume("endpoint/v1/120", (err, msg, done, info) => {
    assert.equal(err, null);
    consumed.push(`${msg}:${info.nbRequeues}`);
    done();
  });
  const added = [];
  listener.addId(10, (err) => added.push(err));
  await waitFor(() => added.length === 1);
  assert.deepEqual(added, [null]);

  const sent = [];
  mq.send("endpoint/v1/120", "coucou", (err) => sent.push(err));
  mq.send("endpoint/v1/10", "salut", (err) => sent.push(err));
  await waitFor(() => sent.length === 2 && heard.length === 2 && consumed.length === 1);
  assert.deepEqual(sent, [null, null]);
  assert.deepEqual(heard.sort(), ["10:salut", "120:coucou"]);
  assert.deepEqual(consumed, ["coucou:0"]);

  const refused = [];
  mq.send("*/v1/1", "x", (err) => refused.push(err));
  await waitFor(() => refused.length === 1);
  assert.ok(refused[0] instanceof kittenMQ.KittenError);
  assert.equal(refused[0].code, "BAD_CHANNEL");
});
