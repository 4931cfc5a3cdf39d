import { afterAll, describe, expect, it } from "bun:test";
import { mkdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { decodeProtectedHeader, importSPKI, jwtVerify } from "jose";
import { loadOrCreateKeys, signHelloToken } from "../../src/client/keys.ts";
import { KittenError } from "../../src/protocol/errors.ts";
import { TempDirs } from "../helpers/temp_dir.ts";

const temps = new TempDirs("kitten-keys-");
afterAll(temps.removeAll);

async function keyError(promise: Promise<unknown>): Promise<KittenError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(KittenError);
    expect((error as KittenError).code).toBe("KEY_FILE_ERROR");
    return error as KittenError;
  }
  throw new Error("expected a KEY_FILE_ERROR, got none");
}

describe("loadOrCreateKeys()", () => {
  it("loadOrCreateKeys() creates the directory and a PKCS#8 .pem (mode 0600) and SPKI .pub", async () => {
    const dir = join(temps.make(), "nested", "keys");
    const keys = await loadOrCreateKeys(dir, "client");
    const pem = await readFile(join(dir, "client.pem"), "utf8");
    const pub = await readFile(join(dir, "client.pub"), "utf8");
    expect(pem).toStartWith("-----BEGIN PRIVATE KEY-----\n");
    expect(pub).toStartWith("-----BEGIN PUBLIC KEY-----\n");
    expect((await stat(join(dir, "client.pem"))).mode & 0o777).toBe(0o600);
    expect(keys.publicKeyPem.trim()).toBe(pub.trim());
    expect(keys.privateKey.type).toBe("private");
    expect(keys.privateKey.algorithm.name).toBe("Ed25519");
  });

  it("loadOrCreateKeys() returns a non-extractable private key", async () => {
    const keys = await loadOrCreateKeys(temps.make(), "client");
    expect(keys.privateKey.extractable).toBe(false);
    await expect(crypto.subtle.exportKey("pkcs8", keys.privateKey)).rejects.toThrow();
  });

  it("loadOrCreateKeys() loads an existing pair instead of creating a new one", async () => {
    const dir = temps.make();
    const first = await loadOrCreateKeys(dir, "client");
    const before = await readFile(join(dir, "client.pem"), "utf8");
    const second = await loadOrCreateKeys(dir, "client");
    expect(second.publicKeyPem).toBe(first.publicKeyPem);
    expect(await readFile(join(dir, "client.pem"), "utf8")).toBe(before);
  });

  it("loadOrCreateKeys() keeps separate pairs per name", async () => {
    const dir = temps.make();
    const a = await loadOrCreateKeys(dir, "a");
    const b = await loadOrCreateKeys(dir, "b");
    expect(a.publicKeyPem).not.toBe(b.publicKeyPem);
  });

  it("loadOrCreateKeys() creates one pair when called concurrently", async () => {
    const dir = temps.make();
    const all = await Promise.all([1, 2, 3, 4].map(() => loadOrCreateKeys(dir, "client")));
    for (const keys of all) expect(keys.publicKeyPem).toBe(all[0]!.publicKeyPem);
  });

  it("loadOrCreateKeys() refuses a lone .pem and names the missing .pub", async () => {
    const dir = temps.make();
    await loadOrCreateKeys(dir, "client");
    await rm(join(dir, "client.pub"));
    const error = await keyError(loadOrCreateKeys(dir, "client"));
    expect(error.message).toContain(join(dir, "client.pub"));
    expect(error.message).toContain("missing");
  });

  it("loadOrCreateKeys() refuses a lone .pub and names the missing .pem (never overwrites it)", async () => {
    const dir = temps.make();
    await loadOrCreateKeys(dir, "client");
    await rm(join(dir, "client.pem"));
    const pub = await readFile(join(dir, "client.pub"), "utf8");
    const error = await keyError(loadOrCreateKeys(dir, "client"));
    expect(error.message).toContain(join(dir, "client.pem"));
    expect(await readFile(join(dir, "client.pub"), "utf8")).toBe(pub);
  });

  it("loadOrCreateKeys() refuses a .pem that is not a key and names it", async () => {
    const dir = temps.make();
    await loadOrCreateKeys(dir, "client");
    await writeFile(join(dir, "client.pem"), "-----BEGIN PRIVATE KEY-----\nnot base64!\n-----END PRIVATE KEY-----\n");
    const error = await keyError(loadOrCreateKeys(dir, "client"));
    expect(error.message).toContain(join(dir, "client.pem"));
  });

  it("loadOrCreateKeys() refuses a .pub that is not a key and names it", async () => {
    const dir = temps.make();
    await loadOrCreateKeys(dir, "client");
    await writeFile(join(dir, "client.pub"), "hello");
    const error = await keyError(loadOrCreateKeys(dir, "client"));
    expect(error.message).toContain(join(dir, "client.pub"));
  });

  it("loadOrCreateKeys() refuses a non-Ed25519 key (an ECDSA .pem)", async () => {
    const dir = temps.make();
    await loadOrCreateKeys(dir, "client");
    const ec = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign"]);
    const der = new Uint8Array(await crypto.subtle.exportKey("pkcs8", (ec as CryptoKeyPair).privateKey));
    const pem = `-----BEGIN PRIVATE KEY-----\n${Buffer.from(der).toString("base64")}\n-----END PRIVATE KEY-----\n`;
    await writeFile(join(dir, "client.pem"), pem);
    const error = await keyError(loadOrCreateKeys(dir, "client"));
    expect(error.message).toContain(join(dir, "client.pem"));
  });

  it("loadOrCreateKeys() refuses a .pub that belongs to another .pem", async () => {
    const dir = temps.make();
    await loadOrCreateKeys(dir, "a");
    await loadOrCreateKeys(dir, "b");
    await writeFile(join(dir, "a.pub"), await readFile(join(dir, "b.pub")));
    const error = await keyError(loadOrCreateKeys(dir, "a"));
    expect(error.message).toContain("is not the public key of");
  });

  it("loadOrCreateKeys() reports an unreadable key file by name", async () => {
    const dir = temps.make();
    await mkdir(join(dir, "client.pem")); // a directory: reading it fails with EISDIR even as root
    const error = await keyError(loadOrCreateKeys(dir, "client"));
    expect(error.message).toContain(`Cannot read key file "${join(dir, "client.pem")}"`);
  });

  it("loadOrCreateKeys() refuses a keysName that is a path", async () => {
    const dir = temps.make();
    await keyError(loadOrCreateKeys(dir, "../escape"));
    await keyError(loadOrCreateKeys(dir, ""));
  });
});

describe("signHelloToken()", () => {
  it("signHelloToken() makes an EdDSA JWT with iss, aud, nonce, iat and exp that verifies with the .pub", async () => {
    const keys = await loadOrCreateKeys(temps.make(), "client");
    const now = Math.floor(Date.now() / 1000);
    const token = await signHelloToken({
      privateKey: keys.privateKey,
      clientId: "c-1",
      audience: "broker-1",
      nonce: "N",
    });
    expect(decodeProtectedHeader(token)).toEqual({ alg: "EdDSA", typ: "JWT" });
    const { payload } = await jwtVerify(token, await importSPKI(keys.publicKeyPem, "EdDSA"), {
      algorithms: ["EdDSA"],
    });
    expect(payload.iss).toBe("c-1");
    expect(payload.aud).toBe("broker-1");
    expect(payload.nonce).toBe("N");
    expect(Math.abs(payload.iat! - now)).toBeLessThanOrEqual(2);
    expect(payload.exp! - payload.iat!).toBe(60);
  });

  it("signHelloToken() honours ttlSeconds and now", async () => {
    const keys = await loadOrCreateKeys(temps.make(), "client");
    const token = await signHelloToken({
      privateKey: keys.privateKey,
      clientId: "c",
      audience: "b",
      nonce: "n",
      ttlSeconds: 10,
      now: 1_000_000,
    });
    const payload = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString());
    expect(payload.iat).toBe(1_000_000);
    expect(payload.exp).toBe(1_000_010);
  });

  it("signHelloToken() refuses a ttlSeconds outside 1..300", async () => {
    const keys = await loadOrCreateKeys(temps.make(), "client");
    const base = { privateKey: keys.privateKey, clientId: "c", audience: "b", nonce: "n" };
    for (const ttlSeconds of [0, -1, 301, 1.5, Number.NaN]) {
      await expect(signHelloToken({ ...base, ttlSeconds })).rejects.toThrow(RangeError);
    }
  });
});
