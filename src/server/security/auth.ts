/**
 * Hello authentication: challenge and response.
 *
 * The broker sends a fresh random nonce with its challenge; the client answers with a short-lived
 * EdDSA JWT (`iss` clientId, `aud` serviceId, `nonce`, `iat`, `exp`) signed with its private key.
 * The broker verifies it against the client's pinned key (or, for a first connection, the key the
 * client presents, which is pinned only after this succeeds). The identity is then bound to the
 * connection; later operations carry no token.
 *
 * Replays: each connection gets its own nonce from createChallenge() and uses it for exactly one
 * hello, and a token is accepted only when its signed `nonce` equals that connection's nonce. A
 * token captured from another connection carries another nonce and is refused (TOKEN_REPLAYED),
 * so no cache of used tokens (`jti`) is needed: nonce equality is the replay cache, and it holds
 * nothing, and no result (success or failure) outlives its connection.
 *
 * Every failure has its own code so an operator can tell a clock problem from a stolen token.
 */
import { base64url, type CryptoKey, decodeProtectedHeader, errors, importSPKI, jwtVerify } from "jose";
import { type ErrorCode, KittenError } from "../../protocol/errors.ts";

/** Seconds a client's clock may run ahead of the broker's (`iat` in the future). */
export const MAX_CLOCK_SKEW_SECONDS = 30;
/** Longest accepted token lifetime (`exp - iat`): a leaked token is useless after minutes, not hours. */
export const MAX_TOKEN_LIFETIME_SECONDS = 300;
/** A hello token is about 250 characters; this bounds what an unauthenticated peer makes us parse. */
const MAX_TOKEN_LENGTH = 4096;
/** The only algorithm: a token naming `none`, `HS256` (keyed with the public key) or ES* is refused. */
const ALGORITHM = "EdDSA";

export interface VerifyHelloInput {
  token: unknown;
  /** This connection's challenge, from createChallenge(). */
  nonce: string;
  /** The broker's `serviceId`: the token's required audience. */
  serviceId: string;
  /** The key to verify with (SPKI PEM): the pinned key, or the presented one on a first connection. */
  publicKeyPem: string;
  /** The client id the connection claims; the token's `iss` must be it. */
  clientId: string;
  /** Unix seconds, for tests; the clock by default. */
  now?: number;
}

export interface HelloClaims {
  clientId: string;
  issuedAt: number;
  expiresAt: number;
}

/** A fresh challenge nonce: 32 random bytes, base64url (43 characters). One per connection. */
export function createChallenge(): string {
  return base64url.encode(crypto.getRandomValues(new Uint8Array(32)));
}

/**
 * Verifies a hello token. Resolves with its claims, or rejects with a KittenError:
 * BAD_ALGORITHM, BAD_SIGNATURE, TOKEN_EXPIRED, BAD_ISSUER, BAD_AUDIENCE, TOKEN_REPLAYED, or
 * AUTH_FAILED (malformed, missing claims, issued in the future, lifetime too long, unusable key).
 */
export async function verifyHelloToken(input: VerifyHelloInput): Promise<HelloClaims> {
  const { token, nonce, serviceId, clientId } = input;
  const now = input.now ?? Math.floor(Date.now() / 1000);
  const refuse = (code: ErrorCode, problem: string, cause?: unknown): KittenError =>
    new KittenError(
      code,
      `Cannot authenticate client "${clientId}": ${problem}`,
      undefined,
      cause === undefined ? undefined : { cause },
    );

  if (typeof token !== "string" || token.length === 0 || token.length > MAX_TOKEN_LENGTH) {
    throw refuse("AUTH_FAILED", `the hello token must be a compact JWT of at most ${MAX_TOKEN_LENGTH} characters`);
  }
  // The algorithm is checked on the header before any key is used: an `alg` chosen by the peer
  // must never select how the broker verifies (`none`, or HS256 keyed with the public key).
  let alg: unknown;
  try {
    alg = decodeProtectedHeader(token).alg;
  } catch (error) {
    throw refuse("AUTH_FAILED", "the hello token is not a compact JWT", error);
  }
  if (alg !== ALGORITHM) {
    throw refuse("BAD_ALGORITHM", `the hello token uses algorithm ${JSON.stringify(alg)}, only "EdDSA" is accepted`);
  }

  let key: CryptoKey;
  try {
    key = await importSPKI(input.publicKeyPem.trim(), ALGORITHM);
  } catch (error) {
    throw refuse("AUTH_FAILED", "its public key is not an Ed25519 SPKI PEM", error);
  }

  let payload: Record<string, unknown>;
  try {
    // jose checks the signature first, then `exp` (no tolerance) and claim types; the rest is below.
    ({ payload } = await jwtVerify(token, key, {
      algorithms: [ALGORITHM],
      currentDate: new Date(now * 1000),
      clockTolerance: 0,
    }));
  } catch (error) {
    throw mapJoseError(error, refuse);
  }

  // From here the token is genuinely signed by the key: claim problems are the client's mistakes
  // or replays, never forgeries.
  if (payload.iss !== clientId) {
    throw refuse("BAD_ISSUER", `the hello token was issued by ${JSON.stringify(payload.iss)}, not by this client`);
  }
  if (payload.aud !== serviceId) {
    throw refuse(
      "BAD_AUDIENCE",
      `the hello token is for ${JSON.stringify(payload.aud)}, not for this broker ("${serviceId}")`,
    );
  }
  const { iat, exp } = payload;
  if (typeof exp !== "number" || typeof iat !== "number") {
    throw refuse("AUTH_FAILED", `the hello token must carry numeric "iat" and "exp" claims`);
  }
  if (iat > now + MAX_CLOCK_SKEW_SECONDS) {
    throw refuse(
      "AUTH_FAILED",
      `the hello token was issued ${
        iat - now
      } s in the future (more than ${MAX_CLOCK_SKEW_SECONDS} s): check the client's clock`,
    );
  }
  if (exp - iat > MAX_TOKEN_LIFETIME_SECONDS) {
    throw refuse(
      "AUTH_FAILED",
      `the hello token lives ${exp - iat} s, more than the ${MAX_TOKEN_LIFETIME_SECONDS} s accepted`,
    );
  }
  if (typeof payload.nonce !== "string") {
    throw refuse("AUTH_FAILED", `the hello token carries no "nonce" claim`);
  }
  if (payload.nonce !== nonce) {
    throw refuse("TOKEN_REPLAYED", "the hello token was made for another challenge (a replayed token)");
  }
  return { clientId, issuedAt: iat, expiresAt: exp };
}

function mapJoseError(error: unknown, refuse: (code: ErrorCode, problem: string, cause?: unknown) => KittenError) {
  if (error instanceof errors.JWSSignatureVerificationFailed) {
    return refuse("BAD_SIGNATURE", "the hello token's signature does not match the client's key", error);
  }
  if (error instanceof errors.JWTExpired) return refuse("TOKEN_EXPIRED", "the hello token has expired", error);
  if (error instanceof errors.JOSEAlgNotAllowed) {
    return refuse("BAD_ALGORITHM", `only "EdDSA" hello tokens are accepted`, error);
  }
  const detail = error instanceof Error ? error.message : String(error);
  return refuse("AUTH_FAILED", `the hello token is invalid (${detail})`, error);
}
