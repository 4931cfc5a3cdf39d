import { beforeAll, describe, expect, it } from "bun:test";
import { exportSPKI, type JWTPayload, SignJWT } from "jose";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadOrCreateKeys, signHelloToken } from "../../src/client/keys.ts";
import { KittenError } from "../../src/protocol/errors.ts";
import {
  createChallenge,
  MAX_CLOCK_SKEW_SECONDS,
  MAX_TOKEN_LIFETIME_SECONDS,
  type VerifyHelloInput,
  verifyHelloToken,
} from "../../src/server/security/auth.ts";

const NOW = 1_800_000_000;
const CLIENT = "easilys-1";
const SERVICE = "broker-1";
const NONCE = "nonce-A";

let privateKey: CryptoKey;
let publicKeyPem: string;
let otherPrivateKey: CryptoKey;

async function ed25519(): Promise<CryptoKeyPair> {
  // Bun's lib types pick the single-key overload for Ed25519; at run time it is a pair.
  const pair: unknown = await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"]);
  return pair as CryptoKeyPair;
}

beforeAll(async () => {
  const pair = await ed25519();
  privateKey = pair.privateKey;
  publicKeyPem = await exportSPKI(pair.publicKey);
  otherPrivateKey = (await ed25519()).privateKey;
});

/** A token like the client makes; `claims` overrides or (with undefined) removes claims. */
async function token(claims: Partial<Record<keyof JWTPayload | "nonce", unknown>> = {}, key = privateKey) {
  const payload: Record<string, unknown> = { iss: CLIENT, aud: SERVICE, nonce: NONCE, iat: NOW, exp: NOW + 60 };
  for (const [name, value] of Object.entries(claims)) {
    if (value === undefined) delete payload[name];
    else payload[name] = value;
  }
  return await new SignJWT(payload).setProtectedHeader({ alg: "EdDSA", typ: "JWT" }).sign(key);
}

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");

function verify(tokenValue: unknown, overrides: Partial<VerifyHelloInput> = {}) {
  return verifyHelloToken({
    token: tokenValue,
    nonce: NONCE,
    serviceId: SERVICE,
    publicKeyPem,
    clientId: CLIENT,
    now: NOW,
    ...overrides,
  });
}

async function refusal(promise: Promise<unknown>): Promise<KittenError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(KittenError);
    expect((error as KittenError).message).toContain(`client "${CLIENT}"`);
    return error as KittenError;
  }
  throw new Error("expected a refusal, got none");
}
const codeOf = async (promise: Promise<unknown>) => (await refusal(promise)).code;

describe("createChallenge()", () => {
  it("createChallenge() returns 32 random bytes as base64url, fresh each time", () => {
    const seen = new Set<string>();
    for (let i = 0; i < 100; i++) {
      const nonce = createChallenge();
      expect(nonce).toMatch(/^[A-Za-z0-9_-]{43}$/);
      seen.add(nonce);
    }
    expect(seen.size).toBe(100);
  });
});

describe("verifyHelloToken()", () => {
  it("verifyHelloToken() accepts a token signed by the key for this nonce and audience", async () => {
    expect(await verify(await token())).toEqual({ clientId: CLIENT, issuedAt: NOW, expiresAt: NOW + 60 });
  });

  it("verifyHelloToken() accepts a pinned PEM with other line endings", async () => {
    const pem = `${publicKeyPem.replaceAll("\n", "\r\n")}\n`;
    expect((await verify(await token(), { publicKeyPem: pem })).clientId).toBe(CLIENT);
  });

  it("verifyHelloToken() refuses an expired token with TOKEN_EXPIRED", async () => {
    expect(await codeOf(verify(await token({ iat: NOW - 120, exp: NOW - 60 })))).toBe("TOKEN_EXPIRED");
    expect(await codeOf(verify(await token({ exp: NOW })))).toBe("TOKEN_EXPIRED");
    expect((await verify(await token({ exp: NOW + 1 }))).expiresAt).toBe(NOW + 1);
  });

  it("verifyHelloToken() refuses another broker's audience with BAD_AUDIENCE", async () => {
    const error = await refusal(verify(await token({ aud: "broker-2" })));
    expect(error.code).toBe("BAD_AUDIENCE");
    expect(error.message).toContain('"broker-2"');
    expect(await codeOf(verify(await token({ aud: [SERVICE, "x"] })))).toBe("BAD_AUDIENCE");
    expect(await codeOf(verify(await token({ aud: undefined })))).toBe("BAD_AUDIENCE");
  });

  it("verifyHelloToken() refuses a token signed by another key with BAD_SIGNATURE", async () => {
    expect(await codeOf(verify(await token({}, otherPrivateKey)))).toBe("BAD_SIGNATURE");
  });

  it("verifyHelloToken() refuses a tampered payload with BAD_SIGNATURE", async () => {
    const [header, payload, signature] = (await token({ aud: "broker-2" })).split(".");
    const claims = JSON.parse(Buffer.from(payload!, "base64url").toString());
    const forged = `${header}.${b64({ ...claims, aud: SERVICE })}.${signature}`;
    expect(await codeOf(verify(forged))).toBe("BAD_SIGNATURE");
  });

  it('verifyHelloToken() refuses an unsigned "none" token with BAD_ALGORITHM', async () => {
    const claims = { iss: CLIENT, aud: SERVICE, nonce: NONCE, iat: NOW, exp: NOW + 60 };
    const none = `${b64({ alg: "none", typ: "JWT" })}.${b64(claims)}.`;
    expect(await codeOf(verify(none))).toBe("BAD_ALGORITHM");
    expect(await codeOf(verify(`${b64({ typ: "JWT" })}.${b64(claims)}.`))).toBe("BAD_ALGORITHM");
  });

  it("verifyHelloToken() refuses an HS256 token keyed with the public key (alg confusion) with BAD_ALGORITHM", async () => {
    const secret = new TextEncoder().encode(publicKeyPem);
    const hs = await new SignJWT({ nonce: NONCE }).setProtectedHeader({ alg: "HS256" }).setIssuer(CLIENT)
      .setAudience(SERVICE).setIssuedAt(NOW).setExpirationTime(NOW + 60).sign(secret);
    expect(await codeOf(verify(hs))).toBe("BAD_ALGORITHM");
  });

  it("verifyHelloToken() refuses an ES256 token with BAD_ALGORITHM", async () => {
    const ec = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign"]) as CryptoKeyPair;
    const es = await new SignJWT({ nonce: NONCE }).setProtectedHeader({ alg: "ES256" }).setIssuer(CLIENT)
      .setAudience(SERVICE).setIssuedAt(NOW).setExpirationTime(NOW + 60).sign(ec.privateKey);
    expect(await codeOf(verify(es))).toBe("BAD_ALGORITHM");
  });

  it("verifyHelloToken() refuses a token made for nonce A when the challenge is nonce B (replay)", async () => {
    const forA = await token({ nonce: "A" });
    expect((await verify(forA, { nonce: "A" })).clientId).toBe(CLIENT);
    const error = await refusal(verify(forA, { nonce: "B" }));
    expect(error.code).toBe("TOKEN_REPLAYED");
    // The same token presented on a second connection (fresh challenge) is refused too.
    expect(await codeOf(verify(forA, { nonce: createChallenge() }))).toBe("TOKEN_REPLAYED");
  });

  it("verifyHelloToken() refuses a token without a nonce with AUTH_FAILED", async () => {
    expect(await codeOf(verify(await token({ nonce: undefined })))).toBe("AUTH_FAILED");
    expect(await codeOf(verify(await token({ nonce: 42 })))).toBe("AUTH_FAILED");
  });

  it("verifyHelloToken() refuses a token issued by another client id with BAD_ISSUER", async () => {
    expect(await codeOf(verify(await token({ iss: "easilys-2" })))).toBe("BAD_ISSUER");
    expect(await codeOf(verify(await token({ iss: undefined })))).toBe("BAD_ISSUER");
  });

  it("verifyHelloToken() refuses missing iat or exp with AUTH_FAILED", async () => {
    expect(await codeOf(verify(await token({ exp: undefined })))).toBe("AUTH_FAILED");
    expect(await codeOf(verify(await token({ iat: undefined })))).toBe("AUTH_FAILED");
    expect(await codeOf(verify(await token({ exp: "soon" })))).toBe("AUTH_FAILED");
  });

  it("verifyHelloToken() allows 30 s of clock skew on iat and refuses more", async () => {
    const skew = MAX_CLOCK_SKEW_SECONDS;
    expect((await verify(await token({ iat: NOW + skew, exp: NOW + skew + 60 }))).issuedAt).toBe(NOW + skew);
    const error = await refusal(verify(await token({ iat: NOW + skew + 1, exp: NOW + skew + 61 })));
    expect(error.code).toBe("AUTH_FAILED");
    expect(error.message).toContain("clock");
  });

  it("verifyHelloToken() refuses a lifetime over 300 s with AUTH_FAILED", async () => {
    const max = MAX_TOKEN_LIFETIME_SECONDS;
    expect((await verify(await token({ exp: NOW + max }))).expiresAt).toBe(NOW + max);
    expect(await codeOf(verify(await token({ exp: NOW + max + 1 })))).toBe("AUTH_FAILED");
    // The original's 12-hour tokens are refused.
    expect(await codeOf(verify(await token({ exp: NOW + 43_200 })))).toBe("AUTH_FAILED");
  });

  it("verifyHelloToken() refuses malformed and oversized tokens with AUTH_FAILED", async () => {
    const good = await token();
    const malformed: unknown[] = ["", "garbage", "a.b", "a.b.c", good.split(".").slice(0, 2).join("."), 42, null, {
      token: good,
    }, `${good}${"x".repeat(5000)}`];
    for (const value of malformed) expect(await codeOf(verify(value))).toBe("AUTH_FAILED");
  });

  it("verifyHelloToken() refuses with AUTH_FAILED when the key is not a usable Ed25519 PEM", async () => {
    expect(await codeOf(verify(await token(), { publicKeyPem: "not a key" }))).toBe("AUTH_FAILED");
  });

  it("verifyHelloToken() accepts the client's own key files and token (keys.ts), and refuses it for another nonce", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kitten-auth-"));
    try {
      const keys = await loadOrCreateKeys(dir, "client");
      const nonce = createChallenge();
      const hello = await signHelloToken({ privateKey: keys.privateKey, clientId: CLIENT, audience: SERVICE, nonce });
      const claims = await verifyHelloToken({
        token: hello,
        nonce,
        serviceId: SERVICE,
        publicKeyPem: keys.publicKeyPem,
        clientId: CLIENT,
      });
      expect(claims.clientId).toBe(CLIENT);
      expect(
        await codeOf(verifyHelloToken({
          token: hello,
          nonce: createChallenge(),
          serviceId: SERVICE,
          publicKeyPem: keys.publicKeyPem,
          clientId: CLIENT,
        })),
      ).toBe("TOKEN_REPLAYED");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
