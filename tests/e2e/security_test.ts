/**
 * Security end to end: client key files, key pinning, the authenticated
 * handshake and its refusals. One test per refusal; each asserts the exact code, that the message
 * names what failed, that the connection is closed, and that the broker still serves a bystander.
 */
import { afterEach, expect, it } from "bun:test";
import { copyFile, readdir, readFile, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { SignJWT } from "jose";
import { Client } from "../../mod.ts";
import { loadOrCreateKeys } from "../../src/client/keys.ts";
import { encode, OP } from "../../src/protocol/mod.ts";
import { PROTOCOL_VERSION } from "../../src/version.ts";
import { Cleanup, clientOptions, rejection, waitFor } from "../helpers/broker.ts";
import { thrown } from "../helpers/errors.ts";
import { testKeysDirectory } from "../helpers/keys.ts";
import {
  attacker,
  bystander,
  challengeOf,
  expectFatal,
  newKeys,
  token,
  unsignedToken,
} from "../helpers/security.ts";
import { TempDirs } from "../helpers/temp_dir.ts";
import { answerChallenge, dial, hello, proofFor } from "../helpers/wire.ts";

const cleanup = new Cleanup();
const temps = new TempDirs("kitten-sec-");
afterEach(async () => {
  await cleanup.run(); // clients and brokers first: they may still use the folders
  temps.removeAll();
});

let seq = 0;
/** A client id no earlier test used (pins are per broker, but keep names telling). */
const freshId = (name: string) => `${name}-${process.pid}-${++seq}`;

function pinFile(broker: { broker: { config: { registeredClientsPath: string } } }, id: string): string {
  return join(broker.broker.config.registeredClientsPath, `${id}.pub`);
}

// ── client key files ─────────────────────────────────────────────────────────────────────────

it("e2e: security keys: a keysDirectory with only the .pem refuses connect() with KEY_FILE_ERROR naming the missing .pub", async () => {
  const broker = cleanup.broker();
  const source = temps.make();
  await loadOrCreateKeys(source, "half");
  const keysDirectory = temps.make();
  await copyFile(join(source, "half.pem"), join(keysDirectory, "half.pem"));

  const mq = cleanup.add(new Client());
  const error = await rejection(mq.connect(clientOptions(broker, { keysDirectory, keysName: "half" })));
  expect(error.code).toBe("KEY_FILE_ERROR");
  expect(error.message).toContain(join(keysDirectory, "half.pub"));
  expect(error.message).toContain("missing");
  expect(mq.isConnected()).toBe(false);
  expect(await readdir(keysDirectory)).toEqual(["half.pem"]); // no new pair generated over the half
  expect(broker.broker.sessions.size).toBe(0); // it never dialed
});

it("e2e: security keys: a keysDirectory with only the .pub refuses connect() with KEY_FILE_ERROR naming the missing .pem", async () => {
  const broker = cleanup.broker();
  const source = temps.make();
  await loadOrCreateKeys(source, "half");
  const keysDirectory = temps.make();
  await copyFile(join(source, "half.pub"), join(keysDirectory, "half.pub"));

  const mq = cleanup.add(new Client());
  const error = await rejection(mq.connect(clientOptions(broker, { keysDirectory, keysName: "half" })));
  expect(error.code).toBe("KEY_FILE_ERROR");
  expect(error.message).toContain(join(keysDirectory, "half.pem"));
  expect(await readdir(keysDirectory)).toEqual(["half.pub"]);
});

it("e2e: security keys: a missing pair is created (.pem mode 0600) and its .pub is what the broker pins", async () => {
  const broker = cleanup.broker();
  const keysDirectory = join(temps.make(), "nested", "keys"); // the folder does not exist yet
  const id = freshId("newkeys");
  await cleanup.client(broker, { clientId: id, keysDirectory, keysName: "me" });
  const pem = await stat(join(keysDirectory, "me.pem"));
  expect(pem.mode & 0o777).toBe(0o600);
  const pub = await readFile(join(keysDirectory, "me.pub"), "utf8");
  expect(pub).toContain("BEGIN PUBLIC KEY");
  expect((await readFile(pinFile(broker, id), "utf8")).trim()).toBe(pub.trim());
});

// ── pinning ──────────────────────────────────────────────────────────────────────────────────

it("e2e: security pinning: the first connection pins the key to <registeredClientsPath>/<clientId>.pub", async () => {
  const broker = cleanup.broker();
  const id = freshId("pin-first");
  await expect(stat(pinFile(broker, id))).rejects.toThrow();
  await cleanup.client(broker, { clientId: id, keysName: "pin-a" });
  const pinned = await readFile(pinFile(broker, id), "utf8");
  const own = await readFile(join(testKeysDirectory, "pin-a.pub"), "utf8");
  expect(pinned.trim()).toBe(own.trim());
  expect(broker.logger.lines.some((l) => l.includes(`client=${id};public key pinned`))).toBe(true);
});

it("e2e: security pinning: the same id with another key pair gets KEY_MISMATCH; the pinned key keeps working", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const id = freshId("pin-owner");
  const owner = await cleanup.client(broker, { clientId: id, keysName: "pin-a" });

  const thief = cleanup.add(new Client());
  const error = await rejection(thief.connect(clientOptions(broker, { clientId: id, keysName: "pin-b" })));
  expect(error.code).toBe("KEY_MISMATCH");
  expect(error.message).toContain(`"${id}"`);
  expect(error.message).toContain("pinned");
  expect(thief.isConnected()).toBe(false);

  // Another key directory with the same file names is another identity too.
  const elsewhere = temps.make();
  const thief2 = cleanup.add(new Client());
  const error2 = await rejection(thief2.connect(clientOptions(broker, { clientId: id, keysDirectory: elsewhere, keysName: "pin-a" })));
  expect(error2.code).toBe("KEY_MISMATCH");

  // The owner is unaffected, and a second connection with the pinned key is accepted.
  await owner.send("pin/v1/1", "still me");
  const again = await cleanup.client(broker, { clientId: id, keysName: "pin-a" });
  expect(again.isConnected()).toBe(true);
  await other.check();
});

it("e2e: security pinning: after registry.unpin(id) a new key is accepted (rotation) and the old one is refused", async () => {
  const broker = cleanup.broker();
  const id = freshId("rotate");
  const old = await cleanup.client(broker, { clientId: id, keysName: "rot-old" });
  await old.disconnect();
  const early = cleanup.add(new Client());
  expect((await rejection(early.connect(clientOptions(broker, { clientId: id, keysName: "rot-new" })))).code)
    .toBe("KEY_MISMATCH");

  expect(await broker.broker.registry.unpin(id)).toBe(true);
  await expect(stat(pinFile(broker, id))).rejects.toThrow();
  const rotated = await cleanup.client(broker, { clientId: id, keysName: "rot-new" });
  expect(rotated.isConnected()).toBe(true);
  const pinned = await readFile(pinFile(broker, id), "utf8");
  expect(pinned.trim()).toBe((await readFile(join(testKeysDirectory, "rot-new.pub"), "utf8")).trim());

  const stale = cleanup.add(new Client());
  expect((await rejection(stale.connect(clientOptions(broker, { clientId: id, keysName: "rot-old" })))).code)
    .toBe("KEY_MISMATCH");
});

it("e2e: security pinning: an id like ../evil gets BAD_CLIENT_ID from the broker and the client, and no file is written", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const folder = broker.broker.config.registeredClientsPath;
  const parent = dirname(folder);
  const before = new Set(await readdir(parent));
  for (const id of ["../evil", "..", ".hidden", "a/b", "evil\\..\\x"]) {
    // A hand-made hello: the real client refuses such an id before it dials (below).
    const wire = await attacker(cleanup, broker);
    wire.send([OP.HELLO, PROTOCOL_VERSION, { client: id, token: null }]);
    await expectFatal(wire, "BAD_CLIENT_ID", [JSON.stringify(id)]);
    const mq = cleanup.add(new Client());
    expect(thrown(() => mq.connect(clientOptions(broker, { clientId: id }))).code).toBe("BAD_CLIENT_ID");
  }
  expect((await readdir(parent)).filter((name) => !before.has(name))).toEqual([]);
  expect(await readdir(folder)).toEqual(["bystander.pub"]);
  await other.check();
});

it("e2e: security pinning RACE: two first connections of one id with different keys: exactly one wins (real clients)", async () => {
  const broker = cleanup.broker();
  // Key pairs exist before the race, so both clients dial at the same moment.
  await loadOrCreateKeys(testKeysDirectory, "race-a");
  await loadOrCreateKeys(testKeysDirectory, "race-b");
  for (let round = 0; round < 5; round++) {
    const id = freshId("race");
    const a = cleanup.add(new Client());
    const b = cleanup.add(new Client());
    const results = await Promise.allSettled([
      a.connect(clientOptions(broker, { clientId: id, keysName: "race-a" })),
      b.connect(clientOptions(broker, { clientId: id, keysName: "race-b" })),
    ]);
    const won = results.filter((r) => r.status === "fulfilled");
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    expect(lost[0]!.reason.code).toBe("KEY_MISMATCH");
    const winner = results[0]!.status === "fulfilled" ? "race-a" : "race-b";
    const pinned = await readFile(pinFile(broker, id), "utf8");
    expect(pinned.trim()).toBe((await readFile(join(testKeysDirectory, `${winner}.pub`), "utf8")).trim());
  }
});

it("e2e: security pinning RACE: two AUTHs of one new id written in the same tick: exactly one WELCOME (raw wire)", async () => {
  const broker = cleanup.broker();
  for (let round = 0; round < 10; round++) {
    const id = freshId("wire-race");
    const one = await attacker(cleanup, broker);
    const two = await attacker(cleanup, broker);
    const [c1, c2] = await Promise.all([challengeOf(one, id), challengeOf(two, id)]);
    const [p1, p2] = await Promise.all([proofFor(id, c1, "wrace-a"), proofFor(id, c2, "wrace-b")]);
    one.send([OP.AUTH, p1]);
    two.send([OP.AUTH, p2]);
    const replies = await Promise.all([
      one.expectAny([OP.WELCOME, OP.ERROR]),
      two.expectAny([OP.WELCOME, OP.ERROR]),
    ]);
    const welcomes = replies.filter((r) => r[0] === OP.WELCOME);
    const errors = replies.filter((r) => r[0] === OP.ERROR);
    expect(welcomes).toHaveLength(1);
    expect(errors).toHaveLength(1);
    expect(errors[0]![2]).toBe("KEY_MISMATCH");
    const loser = replies[0]![0] === OP.ERROR ? one : two;
    await loser.closed;
  }
});

// ── the handshake over the raw wire ──────────────────────────────────────────────────────────

it("e2e: security auth: a token signed for another nonce gets TOKEN_REPLAYED and a close", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const keys = await newKeys();
  const id = freshId("replay-nonce");
  const wire = await attacker(cleanup, broker);
  const challenge = await challengeOf(wire, id);
  const otherWire = await attacker(cleanup, broker);
  const otherChallenge = await challengeOf(otherWire, id);
  expect(otherChallenge.nonce).not.toBe(challenge.nonce);
  wire.send([OP.AUTH, { token: await token(keys, id, otherChallenge), publicKey: keys.publicKeyPem }]);
  await expectFatal(wire, "TOKEN_REPLAYED", [`"${id}"`, "another challenge"]);
  // A nonce the broker never issued is the same refusal.
  const third = await attacker(cleanup, broker);
  const c3 = await challengeOf(third, id);
  third.send([OP.AUTH, { token: await token(keys, id, c3, { nonce: "made-up" }), publicKey: keys.publicKeyPem }]);
  await expectFatal(third, "TOKEN_REPLAYED");
  await other.check();
});

it("e2e: security auth: an expired token (iat/exp in the past) gets TOKEN_EXPIRED and a close", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const keys = await newKeys();
  const id = freshId("expired");
  const wire = await attacker(cleanup, broker);
  const challenge = await challengeOf(wire, id);
  const now = Math.floor(Date.now() / 1000);
  wire.send([OP.AUTH, { token: await token(keys, id, challenge, { iat: now - 120, exp: now - 60 }), publicKey: keys.publicKeyPem }]);
  await expectFatal(wire, "TOKEN_EXPIRED", [`"${id}"`, "expired"]);
  expect(await broker.broker.registry.list()).not.toContain(id); // a refused key is not pinned
  await other.check();
});

it("e2e: security auth: a token for another audience gets BAD_AUDIENCE and a close (raw wire)", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const keys = await newKeys();
  const id = freshId("audience");
  const wire = await attacker(cleanup, broker);
  const challenge = await challengeOf(wire, id);
  wire.send([OP.AUTH, { token: await token(keys, id, challenge, { aud: "broker-2" }), publicKey: keys.publicKeyPem }]);
  await expectFatal(wire, "BAD_AUDIENCE", [`"${id}"`, `"broker-2"`, `"broker-1"`]);
  await other.check();
});

it("e2e: security auth: a real client whose host string names another service gets BAD_AUDIENCE", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const mq = cleanup.add(new Client());
  const errors: Error[] = [];
  mq.on("error", (error) => errors.push(error));
  const error = await rejection(
    mq.connect(clientOptions(broker, { hosts: [`127.0.0.1:${broker.port}@wrong-service`] })),
  );
  expect(error.code).toBe("BAD_AUDIENCE");
  expect(error.message).toContain("wrong-service");
  expect(error.message).toContain("broker-1");
  expect(mq.isConnected()).toBe(false);
  await other.check();
});

it("e2e: security auth: a token signed with a key other than the presented one gets BAD_SIGNATURE", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const presented = await newKeys();
  const signer = await newKeys();
  const id = freshId("signature");
  const wire = await attacker(cleanup, broker);
  const challenge = await challengeOf(wire, id);
  wire.send([OP.AUTH, { token: await token(signer, id, challenge), publicKey: presented.publicKeyPem }]);
  await expectFatal(wire, "BAD_SIGNATURE", [`"${id}"`, "signature"]);
  expect(await broker.broker.registry.list()).not.toContain(id);

  // A pinned id: presenting the pinned public key without its private half is the same refusal.
  const owner = await attacker(cleanup, broker);
  const pinnedId = freshId("pinned-sig");
  await hello(owner, pinnedId); // pins the shared "wire" test key
  const pinnedPem = (await proofFor(pinnedId, { nonce: "x", serviceId: "broker-1" })).publicKey;
  const forger = await attacker(cleanup, broker);
  const c2 = await challengeOf(forger, pinnedId);
  forger.send([OP.AUTH, { token: await token(signer, pinnedId, c2), publicKey: pinnedPem }]);
  await expectFatal(forger, "BAD_SIGNATURE", [`"${pinnedId}"`]);
  await other.check();
});

it("e2e: security auth: an HS256 token (keyed with the public key) gets BAD_ALGORITHM", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const keys = await newKeys();
  const id = freshId("hs256");
  const wire = await attacker(cleanup, broker);
  const challenge = await challengeOf(wire, id);
  const now = Math.floor(Date.now() / 1000);
  const forged = await new SignJWT({ nonce: challenge.nonce })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setIssuer(id)
    .setAudience(challenge.serviceId)
    .setIssuedAt(now)
    .setExpirationTime(now + 60)
    .sign(new TextEncoder().encode(keys.publicKeyPem));
  wire.send([OP.AUTH, { token: forged, publicKey: keys.publicKeyPem }]);
  await expectFatal(wire, "BAD_ALGORITHM", [`"${id}"`, `"HS256"`, "EdDSA"]);
  await other.check();
});

it("e2e: security auth: an unsigned alg none token gets BAD_ALGORITHM", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const keys = await newKeys();
  const id = freshId("alg-none");
  const wire = await attacker(cleanup, broker);
  const challenge = await challengeOf(wire, id);
  const now = Math.floor(Date.now() / 1000);
  const forged = unsignedToken({ iss: id, aud: challenge.serviceId, nonce: challenge.nonce, iat: now, exp: now + 60 });
  wire.send([OP.AUTH, { token: forged, publicKey: keys.publicKeyPem }]);
  await expectFatal(wire, "BAD_ALGORITHM", [`"${id}"`, `"none"`]);
  await other.check();
});

it("e2e: security auth: a token whose iss is not the hello client id gets BAD_ISSUER", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const keys = await newKeys();
  const id = freshId("issuer");
  const wire = await attacker(cleanup, broker);
  const challenge = await challengeOf(wire, id);
  wire.send([OP.AUTH, { token: await token(keys, id, challenge, { iss: "someone-else" }), publicKey: keys.publicKeyPem }]);
  await expectFatal(wire, "BAD_ISSUER", [`"${id}"`, `"someone-else"`]);
  await other.check();
});

it("e2e: security auth: a public key that is not Ed25519 SPKI gets AUTH_FAILED", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const keys = await newKeys();
  const id = freshId("bad-pem");
  const wire = await attacker(cleanup, broker);
  const challenge = await challengeOf(wire, id);
  wire.send([OP.AUTH, { token: await token(keys, id, challenge), publicKey: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----" }]);
  await expectFatal(wire, "AUTH_FAILED", [`"${id}"`, "public key"]);
  await other.check();
});

it("e2e: security auth: the exact AUTH frame captured from one connection, replayed on another, is refused", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const keys = await newKeys();
  const id = freshId("captured");
  const victim = await attacker(cleanup, broker);
  const challenge = await challengeOf(victim, id);
  const captured = [OP.AUTH, { token: await token(keys, id, challenge), publicKey: keys.publicKeyPem }];
  victim.send(captured);
  await victim.expect(OP.WELCOME); // the genuine connection is accepted (and pins the key)

  const thief = await attacker(cleanup, broker);
  await challengeOf(thief, id);
  thief.send(captured);
  await expectFatal(thief, "TOKEN_REPLAYED", [`"${id}"`]);
  // The victim's connection is unaffected.
  victim.send([OP.PING, 5]);
  expect(await victim.expect(OP.PONG)).toEqual([OP.PONG, 5]);
  await other.check();
});

it("e2e: security auth: a wrong or missing broker token gets AUTH_FAILED (real client and raw wire)", async () => {
  const broker = cleanup.broker({ socketServer: { token: "s3cret" } });
  const other = await bystander(cleanup, broker, { hosts: [`127.0.0.1:${broker.port}@broker-1#s3cret`] });
  for (const suffix of ["#wrong", ""]) {
    const mq = cleanup.add(new Client());
    const error = await rejection(mq.connect(clientOptions(broker, { hosts: [`127.0.0.1:${broker.port}@broker-1${suffix}`] })));
    expect(error.code).toBe("AUTH_FAILED");
    expect(error.message).toContain("broker token");
  }
  const wire = await attacker(cleanup, broker);
  wire.send([OP.HELLO, PROTOCOL_VERSION, { client: "intruder", token: "s3cre" }]);
  await expectFatal(wire, "AUTH_FAILED", [`"intruder"`, "token"]);
  await other.check();
});

it("e2e: security auth: a SEND before AUTH gets BAD_PROTOCOL and a close, and nothing is queued", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  await challengeOf(wire, freshId("eager"));
  wire.send([OP.SEND, 7, "early/v1/1", "m-1", encode("too early")]);
  const message = await expectFatal(wire, "BAD_PROTOCOL", ["challenge"]);
  expect(message).toContain(String(OP.SEND));
  expect(broker.broker.queues.get("early/v1")).toBeUndefined();

  // Pipelined behind a valid AUTH, before WELCOME: refused too (the handshake is not over).
  const id = freshId("pipelined");
  const eager = await attacker(cleanup, broker);
  const challenge = await challengeOf(eager, id);
  eager.send([OP.AUTH, await proofFor(id, challenge)]);
  eager.send([OP.SEND, 8, "early/v1/1", "m-2", encode("still too early")]);
  await expectFatal(eager, "BAD_PROTOCOL");
  expect(broker.broker.queues.get("early/v1")).toBeUndefined();
  await other.check();
});

it("e2e: security auth: a connection that says hello but never answers the challenge is closed after handshakeTimeoutMs", async () => {
  const broker = cleanup.broker({ socketServer: { handshakeTimeoutMs: 200 } });
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  const started = performance.now();
  await challengeOf(wire, freshId("silent"));
  await waitFor(() => wire.isClosed, 10_000);
  const elapsed = performance.now() - started;
  expect(elapsed).toBeGreaterThanOrEqual(150); // not before the deadline
  expect(elapsed).toBeLessThan(10_000);
  expect(broker.logger.lines.some((l) => l.includes("not authenticated within 200 ms"))).toBe(true);
  // The bystander, authenticated, is not subject to the deadline: it connected before the attacker,
  // so its own deadline, had it kept one, has passed by now.
  await other.check();
});

it("e2e: security auth: a connection that never sends hello is closed after handshakeTimeoutMs", async () => {
  const broker = cleanup.broker({ socketServer: { handshakeTimeoutMs: 200 } });
  const other = await bystander(cleanup, broker);
  const started = performance.now();
  const wire = await dial(broker.port);
  cleanup.defer(() => wire.close());
  await waitFor(() => wire.isClosed, 10_000);
  expect(performance.now() - started).toBeGreaterThanOrEqual(150); // not before the deadline
  await waitFor(() => broker.broker.sessions.size === 1); // only the bystander
  await other.check();
});

it("e2e: security auth: the identity is bound to the connection: a second hello cannot switch client id", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  await hello(wire, freshId("bound"));
  wire.send([OP.HELLO, PROTOCOL_VERSION, { client: "bystander", token: null }]);
  await expectFatal(wire, "BAD_PROTOCOL", ["hello"]);
  await other.check();
});

it("e2e: security auth: an AUTH after WELCOME gets BAD_PROTOCOL (the handshake is over, no re-authentication)", async () => {
  const broker = cleanup.broker();
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  const id = freshId("reauth");
  await hello(wire, id);
  wire.send([OP.AUTH, await proofFor("bystander", { nonce: "n", serviceId: "broker-1" })]);
  await expectFatal(wire, "BAD_PROTOCOL");
  await other.check();
});

it("e2e: security auth: a refused first attempt pins nothing: a correct client can still claim the id", async () => {
  const broker = cleanup.broker();
  const id = freshId("retry");
  const keys = await newKeys();
  const bad = await attacker(cleanup, broker);
  const c1 = await challengeOf(bad, id);
  bad.send([OP.AUTH, { token: await token(keys, id, c1, { aud: "nope" }), publicKey: keys.publicKeyPem }]);
  await expectFatal(bad, "BAD_AUDIENCE");
  // The refused attempt pinned nothing: the same id can still be claimed by a correct client.
  const good = await attacker(cleanup, broker);
  good.send([OP.HELLO, PROTOCOL_VERSION, { client: id, token: null }]);
  const welcome = await answerChallenge(good, id);
  expect(welcome.serviceId).toBe("broker-1");
});
