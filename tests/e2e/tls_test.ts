/**
 * TLS on the client port end to end, with a self-signed certificate made in the
 * test by the openssl CLI. Skipped, saying so, only when openssl is not installed.
 */
import { afterAll, afterEach, beforeAll, expect, it } from "bun:test";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "../../mod.ts";
import { decode, encode, frame, FrameDecoder, OP } from "../../src/protocol/mod.ts";
import { PROTOCOL_VERSION } from "../../src/version.ts";
import { Cleanup, clientOptions, type Received, recorder, sleep, type TestBroker, waitFor } from "../helpers/broker.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

const openssl = Bun.which("openssl");
if (!openssl) console.warn("tls_test: SKIPPED: the openssl CLI is not installed (apt-get install openssl)");

let dir = "";
let certPem = "";
let tls: { cert: string; key: string };

beforeAll(() => {
  if (!openssl) return;
  dir = mkdtempSync(join(tmpdir(), "kitten-tls-"));
  tls = { cert: join(dir, "cert.pem"), key: join(dir, "key.pem") };
  const made = spawnSync(openssl, [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
    "-keyout", tls.key, "-out", tls.cert, "-days", "1", "-subj", "/CN=localhost",
    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
  ], { encoding: "utf8" });
  if (made.status !== 0) throw new Error(`openssl failed: ${made.stderr}`);
  certPem = readFileSync(tls.cert, "utf8");
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function tlsBroker(): TestBroker {
  return cleanup.broker({ socketServer: { tls } });
}

it.skipIf(!openssl)("e2e: tls: a client trusting the certificate (tls.ca) connects, sends and consumes", async () => {
  const broker = tlsBroker();
  const mq = await cleanup.client(broker, { tls: { ca: certPem } });
  const got: Received[] = [];
  await mq.consume("secure/v1/1", recorder(got)).ready;
  for (let i = 0; i < 50; i++) await mq.send("secure/v1/1", { i, text: "é".repeat(i) });
  await waitFor(() => got.length === 50);
  expect(got.map((r) => (r.message as { i: number }).i)).toEqual(Array.from({ length: 50 }, (_, i) => i));
  // By host name too (servername), and a second client sees the first one's messages.
  const other = await cleanup.client(broker, {
    hosts: [`127.0.0.1:${broker.port}@broker-1`],
    tls: { ca: certPem, servername: "localhost" },
  });
  await other.send("secure/v1/1", { i: 50, text: "" });
  await waitFor(() => got.length === 51);
});

it.skipIf(!openssl)("e2e: tls: a client without the ca is not connected within 1 s and reports an 'error'", async () => {
  const broker = tlsBroker();
  const mq = cleanup.add(new Client());
  const errors: Error[] = [];
  mq.on("error", (error) => errors.push(error));
  let connected = false;
  mq.connect(clientOptions(broker, { tls: {} })).then(() => (connected = true), () => {});
  await waitFor(() => errors.length > 0, 1000);
  // The window is the subject ("not connected within 1 s"): a connection that does not happen has no event.
  await sleep(Math.max(0, 1000 - 50));
  expect(connected).toBe(false);
  expect(mq.isConnected()).toBe(false);
  expect(errors[0]!.message).toMatch(/certificate|self[- ]signed|verify/i);
  expect([...broker.broker.sessions].filter((s) => s.state === "open")).toEqual([]);
});

it.skipIf(!openssl)("e2e: tls: a plain-TCP client against the TLS port never gets a challenge or a welcome", async () => {
  const broker = tlsBroker();
  // The real client without tls: not connected.
  const mq = cleanup.add(new Client());
  mq.on("error", () => {});
  let connected = false;
  mq.connect(clientOptions(broker)).then(() => (connected = true), () => {});
  // A raw plain socket sending hello: whatever comes back is not a CHALLENGE or a WELCOME.
  const socket = connect({ host: "127.0.0.1", port: broker.port });
  cleanup.defer(() => socket.destroy());
  const received: Buffer[] = [];
  socket.on("data", (chunk: Buffer) => received.push(chunk));
  socket.on("error", () => {});
  const closed = new Promise<void>((resolve) => socket.on("close", () => resolve()));
  await new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  socket.write(frame(encode([OP.HELLO, PROTOCOL_VERSION, { client: "plain", token: null }])));
  // The broker closes the connection: plain bytes on a TLS port are not a client.
  expect(await Promise.race([closed.then(() => "closed"), sleep(10_000).then(() => "still open")])).toBe("closed");
  const ops: unknown[] = [];
  try {
    for (const body of new FrameDecoder(1 << 20).push(new Uint8Array(Buffer.concat(received)))) {
      ops.push((decode(body) as unknown[])[0]);
    }
  } catch { /* TLS alert bytes are not frames */ }
  expect(ops).not.toContain(OP.CHALLENGE);
  expect(ops).not.toContain(OP.WELCOME);
  // The window is the subject: the real client's retries (every 20 to 100 ms) must all fail.
  await sleep(300);
  expect(connected).toBe(false);
  expect([...broker.broker.sessions].filter((s) => s.state !== "hello")).toEqual([]);
});
