/**
 * The client's key pair and its hello token.
 *
 * A client authenticates with an Ed25519 key pair instead of a password: `<name>.pem` (PKCS#8,
 * private, mode 0600) and `<name>.pub` (SPKI, public, what the broker pins). Both are created with
 * WebCrypto (through jose) on first use, so no openssl is needed. Runtime-neutral (Bun, Deno,
 * Node): only `node:fs/promises`, `node:path` and jose over WebCrypto; never the `Bun` global. Key types
 * are jose's `CryptoKey`, which is each runtime's own WebCrypto type (Deno's differs from Bun's).
 */
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import {
  type CryptoKey,
  exportJWK,
  exportPKCS8,
  exportSPKI,
  generateKeyPair,
  importPKCS8,
  importSPKI,
  SignJWT,
} from "jose";
import { KittenError } from "./errors.ts";
import { writeNewFile } from "./files.ts";
import { type Challenge, OP } from "./ops.ts";

export interface ClientKeys {
  /** Non-extractable signing key: code that holds a Client cannot read the private key back. */
  privateKey: CryptoKey;
  /** The public key as SPKI PEM, exactly what the broker pins for this client id. */
  publicKeyPem: string;
}

export interface HelloTokenInput {
  privateKey: CryptoKey;
  clientId: string;
  /** The broker's `serviceId`: a token made for one broker is refused by another. */
  audience: string;
  /** The broker's challenge for this connection. */
  nonce: string;
  /** Lifetime; short because the token only has to survive one round trip. The broker caps it at 300. */
  ttlSeconds?: number;
  /** Unix seconds, for tests; the clock by default. */
  now?: number;
}

/** The broker refuses tokens living longer than this (see src/server/security/auth.ts). */
const MAX_TTL_SECONDS = 300;
/** How long to wait for a concurrent creator to finish the pair before calling it half a pair. */
const PAIR_SETTLE_MS = 100;

/**
 * Loads `<directory>/<name>.pem` and `.pub`, or creates both (and the directory) when both are
 * missing. Any other state (one file alone, unreadable, not an Ed25519 key, a `.pub` that is not
 * the `.pem`'s public half) is a KEY_FILE_ERROR naming the file: generating a new pair over a
 * damaged one would silently change the client's identity, and the broker would refuse it.
 */
export async function loadOrCreateKeys(directory: string, name: string): Promise<ClientKeys> {
  if (name === "" || name.includes("/") || name.includes("\\")) {
    throw new KittenError("KEY_FILE_ERROR", `Cannot load keys ${JSON.stringify(name)}: keysName must be a file name`);
  }
  const privatePath = join(directory, `${name}.pem`);
  const publicPath = join(directory, `${name}.pub`);
  let privatePem = await readKeyFile(privatePath);
  let publicPem = await readKeyFile(publicPath);
  if (privatePem === null && publicPem === null) {
    await createPair(directory, privatePath, publicPath);
    privatePem = await readKeyFile(privatePath);
    publicPem = await readKeyFile(publicPath);
  }
  if ((privatePem === null) !== (publicPem === null)) {
    // Another process of this client may be between its two links (see createPair): look again once.
    await new Promise((resolve) => setTimeout(resolve, PAIR_SETTLE_MS));
    privatePem = await readKeyFile(privatePath);
    publicPem = await readKeyFile(publicPath);
  }
  if (privatePem === null || publicPem === null) {
    const [present, missing] = privatePem === null ? [publicPath, privatePath] : [privatePath, publicPath];
    throw new KittenError(
      "KEY_FILE_ERROR",
      `Cannot load key pair: "${missing}" is missing while "${present}" exists: restore it, or delete both to create a new ` +
        `key pair (the broker must then forget this client's pinned key)`,
    );
  }
  return await importPair(privatePath, privatePem, publicPath, publicPem);
}

/** Signs the hello token: a compact EdDSA JWT with `iss`, `aud`, `nonce`, `iat` and `exp`. */
export async function signHelloToken(input: HelloTokenInput): Promise<string> {
  const ttl = input.ttlSeconds ?? 60;
  if (!Number.isInteger(ttl) || ttl < 1 || ttl > MAX_TTL_SECONDS) {
    throw new RangeError(`ttlSeconds must be an integer from 1 to ${MAX_TTL_SECONDS}: current value is ${ttl}`);
  }
  const now = input.now ?? Math.floor(Date.now() / 1000);
  return await new SignJWT({ nonce: input.nonce })
    .setProtectedHeader({ alg: "EdDSA", typ: "JWT" })
    .setIssuer(input.clientId)
    .setAudience(input.audience)
    .setIssuedAt(now)
    .setExpirationTime(now + ttl)
    .sign(input.privateKey);
}

/** The file's text, or null when it does not exist; any other failure names the file. */
async function readKeyFile(path: string): Promise<string | null> {
  try {
    return await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw new KittenError("KEY_FILE_ERROR", `Cannot read key file "${path}": ${(error as Error).message}`, undefined, {
      cause: error,
    });
  }
}

/**
 * Writes a new pair. Each file is written in full to a temporary name, then hard-linked to its
 * final name: link() fails with EEXIST instead of overwriting, so two processes of one client
 * starting together never mix halves of two pairs, and a reader never sees a half-written file.
 * The private key goes first: a lone `.pem` is the state the loader waits out above.
 */
async function createPair(directory: string, privatePath: string, publicPath: string): Promise<void> {
  try {
    await mkdir(directory, { recursive: true, mode: 0o700 });
    const pair = await generateKeyPair("EdDSA", { crv: "Ed25519", extractable: true });
    const privatePem = await exportPKCS8(pair.privateKey);
    const publicPem = await exportSPKI(pair.publicKey);
    if (!await writeNewFile(privatePath, `${privatePem}\n`, 0o600)) return; // another process won the race
    await writeNewFile(publicPath, `${publicPem}\n`, 0o644);
  } catch (error) {
    if (error instanceof KittenError) throw error;
    throw new KittenError(
      "KEY_FILE_ERROR",
      `Cannot create key pair in "${directory}": ${(error as Error).message}`,
      undefined,
      { cause: error },
    );
  }
}

async function importPair(privatePath: string, privatePem: string, publicPath: string, publicPem: string) {
  // Extractable once, only to compare its public half with the `.pub` file below.
  const checkable = await importKey(privatePath, () => importPKCS8(privatePem.trim(), "EdDSA", { extractable: true }));
  const publicKey = await importKey(publicPath, () => importSPKI(publicPem.trim(), "EdDSA"));
  const [privateJwk, publicJwk] = await Promise.all([
    exportJWK(checkable),
    exportJWK(publicKey),
  ]);
  if (privateJwk.crv !== "Ed25519" || publicJwk.crv !== "Ed25519") {
    const path = privateJwk.crv !== "Ed25519" ? privatePath : publicPath;
    throw new KittenError("KEY_FILE_ERROR", `Cannot load key file "${path}": it does not hold an Ed25519 key`);
  }
  if (privateJwk.x !== publicJwk.x) {
    // Pinning would pin the `.pub` while the client signs with the `.pem`: every hello would fail.
    throw new KittenError(
      "KEY_FILE_ERROR",
      `Cannot load key pair: "${publicPath}" is not the public key of "${privatePath}": restore the matching pair, or delete ` +
        `both to create a new one`,
    );
  }
  const privateKey = await importPKCS8(privatePem.trim(), "EdDSA"); // non-extractable from here on
  return { privateKey, publicKeyPem: await exportSPKI(publicKey) };
}

async function importKey(path: string, load: () => Promise<CryptoKey>): Promise<CryptoKey> {
  try {
    return await load();
  } catch (error) {
    throw new KittenError(
      "KEY_FILE_ERROR",
      `Cannot load key file "${path}": it does not hold a valid Ed25519 key (${(error as Error).message})`,
      undefined,
      { cause: error },
    );
  }
}

/**
 * The AUTH frame answering a broker's challenge: a hello token for `clientId`, signed with `keys`,
 * for the broker the host names (its serviceId, else the one the challenge gives). Clients and
 * brokers linking to a peer answer the same way.
 */
export async function answerChallenge(
  keys: ClientKeys | Promise<ClientKeys>,
  clientId: string,
  host: { serviceId: string | null },
  challenge: Challenge,
): Promise<unknown[]> {
  const { privateKey, publicKeyPem } = await keys;
  const token = await signHelloToken({ privateKey, clientId, audience: host.serviceId ?? challenge.serviceId, nonce: challenge.nonce });
  return [OP.AUTH, { token, publicKey: publicKeyPem }];
}
