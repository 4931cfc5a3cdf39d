/**
 * Helpers for the security end-to-end tests: a bystander client that proves the broker still
 * serves after an attack, a fatal-refusal check for raw wires, and hand-made hello tokens (jose +
 * WebCrypto) for tokens the real client would never produce.
 */
import { expect } from "bun:test";
import { base64url, type CryptoKey, exportSPKI, SignJWT } from "jose";
import type { ClientOptions } from "../../mod.ts";
import { OP } from "../../src/protocol/mod.ts";
import { PROTOCOL_VERSION } from "../../src/version.ts";
import { type Cleanup, type Received, recorder, type TestBroker, waitFor } from "./broker.ts";
import { dial, type Wire } from "./wire.ts";

/**
 * A well-behaved client connected before the attack. `check()` sends a message through the broker
 * and waits for its delivery: it proves the broker and this client's connection survived.
 * With rules, `options.clientId` must be granted read and write on `channel`.
 */
export async function bystander(
  cleanup: Cleanup,
  broker: TestBroker,
  options: Partial<ClientOptions> = {},
  channel = "by/v1/1",
): Promise<{ check(): Promise<void> }> {
  const mq = await cleanup.client(broker, { clientId: "bystander", ...options });
  const got: Received[] = [];
  await mq.consume(channel, recorder(got)).ready;
  let n = 0;
  const check = async () => {
    const expected = ++n;
    await mq.send(channel, expected);
    await waitFor(() => got.length === expected);
    expect(got[expected - 1]!.message).toBe(expected);
  };
  await check();
  return { check };
}

/** A raw connection closed by the cleanup. */
export async function attacker(cleanup: Cleanup, broker: TestBroker): Promise<Wire> {
  const wire = await dial(broker.port);
  cleanup.defer(() => wire.close());
  return wire;
}

/**
 * Expects ERROR `code` whose message contains every string of `names`, then the broker closing
 * the connection. Returns the message.
 */
export async function expectFatal(wire: Wire, code: string, names: string[] = []): Promise<string> {
  const error = await wire.expect(OP.ERROR);
  expect(error[2]).toBe(code);
  const message = error[3] as string;
  expect(typeof message).toBe("string");
  for (const name of names) expect(message).toContain(name);
  await wire.closed;
  return message;
}

/** Sends HELLO as `client` and returns the broker's challenge. */
export async function challengeOf(
  wire: Wire,
  client: string,
  token: string | null = null,
): Promise<{ nonce: string; serviceId: string }> {
  wire.send([OP.HELLO, PROTOCOL_VERSION, { client, token }]);
  const [, challenge] = await wire.expect(OP.CHALLENGE);
  return challenge as { nonce: string; serviceId: string };
}

export interface RawKeys {
  privateKey: CryptoKey;
  publicKeyPem: string;
}

/** A fresh Ed25519 pair made with WebCrypto directly (not the client's key files). */
export async function newKeys(): Promise<RawKeys> {
  const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"]) as unknown as CryptoKeyPair;
  return { privateKey: pair.privateKey as CryptoKey, publicKeyPem: await exportSPKI(pair.publicKey as CryptoKey) };
}

/**
 * A hello token: by default exactly what a correct client sends (`iss` client, `aud` serviceId,
 * the nonce, 60 s lifetime); `claims` override or add claims (undefined removes one).
 */
export async function token(
  keys: RawKeys,
  client: string,
  challenge: { nonce: string; serviceId: string },
  claims: Record<string, unknown> = {},
): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const payload: Record<string, unknown> = {
    iss: client,
    aud: challenge.serviceId,
    nonce: challenge.nonce,
    iat: now,
    exp: now + 60,
    ...claims,
  };
  for (const key of Object.keys(payload)) if (payload[key] === undefined) delete payload[key];
  return await new SignJWT(payload).setProtectedHeader({ alg: "EdDSA", typ: "JWT" }).sign(keys.privateKey);
}

/** An unsigned (`alg: none`) token: header and payload, empty signature. */
export function unsignedToken(payload: Record<string, unknown>): string {
  const part = (value: unknown) => base64url.encode(new TextEncoder().encode(JSON.stringify(value)));
  return `${part({ alg: "none", typ: "JWT" })}.${part(payload)}.`;
}
