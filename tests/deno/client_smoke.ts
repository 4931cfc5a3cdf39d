/**
 * Deno smoke suite: imports mod.ts unchanged and talks to a real broker subprocess (Bun), so
 * the client is proven to run on Deno. Run with `deno test` (see package.json "test:deno").
 */
import { it } from "node:test";
import assert from "node:assert/strict";
import { client, KittenError } from "../../mod.ts";

interface Broker {
  host: string;
  /** A temp folder for the client's key pair, removed with the broker. */
  keys: string;
  stop(): Promise<void>;
}

async function startBroker(): Promise<Broker> {
  const dir = await Deno.makeTempDir({ prefix: "kitten-deno-" });
  const configPath = `${dir}/config.json`;
  await Deno.writeTextFile(configPath, JSON.stringify({
    socketServer: { port: 0, host: "127.0.0.1" },
    isManagementInterface: false,
    logLevel: 3,
    requeueInterval: 100,
  }));
  const process = new Deno.Command("node_modules/.bin/bun", {
    args: ["src/cli/main.ts", "start", "--config", configPath],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = process.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let output = "";
  let port = 0;
  const deadline = Date.now() + 10_000;
  while (!port) {
    if (Date.now() > deadline) throw new Error(`broker did not start: ${output}`);
    const { value, done } = await reader.read();
    if (done) throw new Error(`broker exited: ${output}`);
    output += value;
    const match = /kitten-mq listening on [^:]+:(\d+)/.exec(output);
    if (match) port = Number(match[1]);
  }
  // Keep draining stdout so the broker never blocks on a full pipe.
  (async () => {
    try {
      while (!(await reader.read()).done);
    } catch { /* closed */ }
  })();
  return {
    host: `127.0.0.1:${port}@broker-1`,
    keys: `${dir}/keys`,
    async stop() {
      process.kill("SIGTERM");
      await process.status;
      await Deno.remove(dir, { recursive: true });
    },
  };
}

it("deno: connect, send, consume and ack against a broker subprocess", async () => {
  const broker = await startBroker();
  const mq = client();
  try {
    await mq.connect({ hosts: [broker.host], clientId: "deno-smoke", keysDirectory: broker.keys });
    const received: unknown[] = [];
    let redelivered = -1;
    let subscription: ReturnType<typeof mq.consume> | undefined;
    const finished = new Promise<void>((resolve) => {
      subscription = mq.consume("deno/v1/*", (err, message, done, info) => {
        assert.equal(err, null);
        if (info!.nbRequeues === 0 && (message as { n: number }).n === 1) return done(false); // requeue once
        if ((message as { n: number }).n === 1) redelivered = info!.nbRequeues;
        received.push(message);
        done();
        if (received.length === 2) resolve();
      });
    });
    await subscription!.ready;
    assert.equal(subscription!.prefetch, 1); // the broker's default prefetch
    await mq.send("deno/v1/a", { n: 1 });
    await mq.send("deno/v1/b", { n: 2 });
    await finished;
    assert.deepEqual(received.map((m) => (m as { n: number }).n).sort(), [1, 2]);
    assert.equal(redelivered, 1);
  } finally {
    await mq.disconnect();
    await broker.stop();
  }
});

it("deno: callback API, listen and coded errors", async () => {
  const broker = await startBroker();
  const mq = client();
  try {
    await new Promise<void>((resolve, reject) =>
      mq.connect({ hosts: [broker.host], clientId: "deno-callbacks", keysDirectory: broker.keys }, (err) => (err ? reject(err) : resolve()))
    );
    const heard = new Promise<{ message: unknown; id: string }>((resolve) =>
      mq.listen({ endpoint: "news", version: "v1", ids: ["fr"] }, (err, message, info) => {
        assert.equal(err, null);
        resolve({ message, id: info!.channel.id });
      })
    );
    const sent = await new Promise<KittenError | null>((resolve) => mq.send("news/v1/fr", "bonjour", resolve));
    assert.equal(sent, null);
    assert.deepEqual(await heard, { message: "bonjour", id: "fr" });
    const refused = await mq.send("*/v1/fr", 1).then(() => null, (error: KittenError) => error);
    assert.ok(refused instanceof KittenError);
    assert.equal(refused.code, "BAD_CHANNEL");
  } finally {
    await mq.disconnect();
    await broker.stop();
  }
});
