/**
 * Pinned client keys: `<registeredClientsPath>/<clientId>.pub`.
 *
 * Trust on first use: the first successful hello of a client id pins its public key, and from then
 * on only that key authenticates the id. The broker must verify the hello token with the presented
 * key BEFORE calling pin(), so a client can only pin a key it holds the private half of.
 *
 * The id is validated before it becomes a file name, so `../x` cannot write outside the folder.
 * Pinning is atomic: the file is created with link(), which fails when the name exists, so two
 * first connections cannot both win (an exists-then-write check would let them).
 */
import { mkdir, open, readdir, readFile, unlink } from "node:fs/promises";
import { join } from "node:path";
import { type CryptoKey, exportJWK, exportSPKI, importSPKI } from "jose";
import { writeNewFile } from "../../protocol/files.ts";
import { isValidClientId, KittenError, validateClientId } from "../../protocol/mod.ts";

/** An Ed25519 SPKI PEM is 113 characters; anything much longer is not one, whatever it says. */
const MAX_PEM_LENGTH = 1024;

export type PinResult = "pinned" | "matches";

/**
 * Reads and writes pinned keys. Found keys are cached (a hello must not cost a file read once the
 * id is known); misses always read the folder, so a key pinned by another broker process sharing
 * the folder is seen. unpin() drops the cache entry; forget() drops entries after an operator
 * changed files behind the broker's back (config reload).
 */
export class KeyRegistry {
  readonly directory: string;
  readonly #cache = new Map<string, string>();

  constructor(directory: string) {
    this.directory = directory;
  }

  /** The pinned key (SPKI PEM) of `clientId`, or null when none is pinned. */
  async get(clientId: string): Promise<string | null> {
    validateClientId(clientId);
    const cached = this.#cache.get(clientId);
    if (cached !== undefined) return cached;
    const path = this.#path(clientId);
    let text: string;
    try {
      text = await readFile(path, "utf8");
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw keyFileError(path, `cannot be read: ${(error as Error).message}`, error);
    }
    // A damaged or foreign file (0.12 pinned ES512 keys) must refuse, never auto-re-pin.
    const pem = await canonicalKey(text).catch((error) => {
      throw keyFileError(
        path,
        "does not hold an Ed25519 public key (keys pinned by kitten-mq 0.12 are ES512: delete the file " +
          "so that the client pins its new key on its next connection)",
        error,
      );
    });
    this.#cache.set(clientId, pem);
    return pem;
  }

  /**
   * Pins `publicKeyPem` for `clientId` unless a key is pinned already: "pinned" when this call
   * created the pin, "matches" when the same key was pinned before, KEY_MISMATCH otherwise.
   * Concurrent first pins with different keys: exactly one is "pinned", the others KEY_MISMATCH.
   */
  async pin(clientId: string, publicKeyPem: string): Promise<PinResult> {
    validateClientId(clientId);
    const pem = await canonicalKey(publicKeyPem).catch((error) => {
      throw new KittenError(
        "AUTH_FAILED",
        `Cannot authenticate client "${clientId}": its public key is not an Ed25519 SPKI PEM`,
        undefined,
        { cause: error },
      );
    });
    const existing = await this.get(clientId);
    if (existing === null && await this.#create(clientId, pem)) {
      this.#cache.set(clientId, pem);
      return "pinned";
    }
    // Pinned before, or another connection won the race between our get() and our link().
    const pinned = existing ?? await this.get(clientId);
    if (pinned === pem) return "matches";
    throw new KittenError(
      "KEY_MISMATCH",
      `Cannot authenticate client "${clientId}": its public key differs from the key pinned for this id; ` +
        `if the client's key was replaced on purpose, an operator must unpin "${clientId}" first`,
    );
  }

  /** Forgets the pinned key (key rotation): true when one was pinned. */
  async unpin(clientId: string): Promise<boolean> {
    validateClientId(clientId);
    this.#cache.delete(clientId);
    try {
      await unlink(this.#path(clientId));
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
      throw keyFileError(this.#path(clientId), `cannot be deleted: ${(error as Error).message}`, error);
    }
  }

  /** Every pinned client id, sorted; files that are not `<valid id>.pub` are ignored. */
  async list(): Promise<string[]> {
    let names: string[];
    try {
      names = await readdir(this.directory);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw keyFileError(this.directory, `cannot be listed: ${(error as Error).message}`, error);
    }
    return names
      .filter((name) => name.endsWith(".pub"))
      .map((name) => name.slice(0, -4))
      .filter(isValidClientId)
      .sort();
  }

  /** Drops cached keys (all, or one id) so the next get() reads the folder again. */
  forget(clientId?: string): void {
    if (clientId === undefined) this.#cache.clear();
    else this.#cache.delete(clientId);
  }

  #path(clientId: string): string {
    return join(this.directory, `${clientId}.pub`);
  }

  /** Creates the pin file (writeNewFile: never overwritten, never half written); false when another pin won. */
  async #create(clientId: string, pem: string): Promise<boolean> {
    const path = this.#path(clientId);
    try {
      await mkdir(this.directory, { recursive: true, mode: 0o700 });
      if (!await writeNewFile(path, pem, 0o644)) return false;
      await syncDirectory(this.directory);
      return true;
    } catch (error) {
      throw keyFileError(path, `cannot be written: ${(error as Error).message}`, error);
    }
  }
}

/**
 * Parses an SPKI PEM as an Ed25519 public key and re-exports it, so that pinned and presented
 * keys compare as strings whatever their line breaks or trailing newline.
 */
async function canonicalKey(pem: string): Promise<string> {
  if (typeof pem !== "string" || pem.length > MAX_PEM_LENGTH) throw new TypeError("not a PEM of an Ed25519 key");
  const key: CryptoKey = await importSPKI(pem.trim(), "EdDSA", { extractable: true });
  if ((await exportJWK(key)).crv !== "Ed25519") throw new TypeError("not an Ed25519 key");
  return `${await exportSPKI(key)}\n`;
}

/** Makes the new directory entry durable; best effort (some filesystems refuse to sync a folder). */
async function syncDirectory(directory: string): Promise<void> {
  try {
    const handle = await open(directory, "r");
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch {
    // The file itself is synced; losing only the entry on a crash means the client pins again.
  }
}

function keyFileError(path: string, problem: string, cause: unknown): KittenError {
  return new KittenError("KEY_FILE_ERROR", `Cannot use pinned key file "${path}": it ${problem}`, undefined, { cause });
}
