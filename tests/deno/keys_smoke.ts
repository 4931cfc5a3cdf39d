/**
 * Deno smoke test of the client's key files and hello token: the same module the client uses on
 * Deno creates a pair in a temp folder, loads it back and signs a token that jose verifies.
 * Run: deno test --allow-read --allow-write --allow-env tests/deno/keys_smoke.ts
 */
import { it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { importSPKI, jwtVerify } from "jose";
import { loadOrCreateKeys, signHelloToken } from "../../src/client/keys.ts";

it("keys: Deno creates a pair, reloads it and signs a hello token that verifies", async () => {
  const dir = await mkdtemp(join(tmpdir(), "kitten-deno-keys-"));
  try {
    const keys = await loadOrCreateKeys(join(dir, "keys"), "client");
    assert.equal((await stat(join(dir, "keys", "client.pem"))).mode & 0o777, 0o600);
    const again = await loadOrCreateKeys(join(dir, "keys"), "client");
    assert.equal(again.publicKeyPem, keys.publicKeyPem);

    const token = await signHelloToken({
      privateKey: again.privateKey,
      clientId: "deno-1",
      audience: "broker-1",
      nonce: "n-1",
    });
    const { payload, protectedHeader } = await jwtVerify(token, await importSPKI(keys.publicKeyPem, "EdDSA"), {
      algorithms: ["EdDSA"],
      issuer: "deno-1",
      audience: "broker-1",
    });
    assert.equal(protectedHeader.alg, "EdDSA");
    assert.equal(payload.nonce, "n-1");
    assert.equal((payload.exp ?? 0) - (payload.iat ?? 0), 60);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

it("keys: Deno refuses a lone private key file with KEY_FILE_ERROR", async () => {
  const dir = await mkdtemp(join(tmpdir(), "kitten-deno-keys-"));
  try {
    await loadOrCreateKeys(dir, "client");
    await rm(join(dir, "client.pub"));
    await assert.rejects(loadOrCreateKeys(dir, "client"), (error: Error & { code?: string }) => {
      assert.equal(error.code, "KEY_FILE_ERROR");
      assert.match(error.message, /client\.pub/);
      return true;
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
