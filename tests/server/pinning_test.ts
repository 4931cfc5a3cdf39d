import { afterAll, describe, expect, it } from "bun:test";
import { readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { exportSPKI, generateKeyPair } from "jose";
import { KittenError } from "../../src/protocol/errors.ts";
import { isValidClientId, validateClientId } from "../../src/protocol/mod.ts";
import { KeyRegistry } from "../../src/server/security/pinning.ts";
import { TempDirs } from "../helpers/temp_dir.ts";

const temps = new TempDirs("kitten-pins-");
afterAll(temps.removeAll);

async function newPublicPem(): Promise<string> {
  const pair = await generateKeyPair("EdDSA", { crv: "Ed25519", extractable: true });
  return await exportSPKI(pair.publicKey);
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(KittenError);
    return (error as KittenError).code;
  }
  throw new Error("expected a KittenError, got none");
}

const BAD_IDS = ["../x", "a/b", "a\\b", ".hidden", "..", ".", "", "x".repeat(200), "a b", "a\n", "é", "a*", "a#b"];

describe("client ids", () => {
  it("validateClientId() accepts letters, digits, dot, dash, underscore up to 128", () => {
    for (const id of ["a", "easilys-1", "A.b_c-9", "x".repeat(128), "-dash", "_u", "a..b"]) {
      expect(isValidClientId(id)).toBe(true);
      validateClientId(id);
    }
  });

  it("validateClientId() refuses traversal, separators, hidden names, empty and too long ids", () => {
    for (const id of BAD_IDS) {
      expect(isValidClientId(id)).toBe(false);
      expect(() => validateClientId(id)).toThrow(KittenError);
    }
    for (const value of [undefined, null, 1, {}, ["a"]]) expect(isValidClientId(value)).toBe(false);
  });

  it("validateClientId() throws BAD_CLIENT_ID and shortens a long id in the message", () => {
    try {
      validateClientId("x".repeat(200));
      throw new Error("not refused");
    } catch (error) {
      expect((error as KittenError).code).toBe("BAD_CLIENT_ID");
      expect((error as KittenError).message.length).toBeLessThan(200);
    }
  });
});

describe("KeyRegistry", () => {
  it("KeyRegistry.pin() pins a first key, creating the folder, and get() returns it", async () => {
    const dir = join(temps.make(), "clients");
    const registry = new KeyRegistry(dir);
    const pem = await newPublicPem();
    expect(await registry.get("c1")).toBeNull();
    expect(await registry.pin("c1", pem)).toBe("pinned");
    expect((await registry.get("c1"))!.trim()).toBe(pem.trim());
    expect((await readFile(join(dir, "c1.pub"), "utf8")).trim()).toBe(pem.trim());
  });

  it("KeyRegistry.pin() answers matches for the same key, whatever its line breaks", async () => {
    const registry = new KeyRegistry(temps.make());
    const pem = await newPublicPem();
    await registry.pin("c1", pem);
    expect(await registry.pin("c1", pem)).toBe("matches");
    expect(await registry.pin("c1", `${pem.replaceAll("\n", "\r\n")}\n\n`)).toBe("matches");
    // A second registry (a restarted broker) reads the file instead of its cache.
    expect(await new KeyRegistry(registry.directory).pin("c1", pem)).toBe("matches");
  });

  it("KeyRegistry.pin() refuses another key with KEY_MISMATCH naming the client", async () => {
    const registry = new KeyRegistry(temps.make());
    await registry.pin("c1", await newPublicPem());
    try {
      await registry.pin("c1", await newPublicPem());
      throw new Error("not refused");
    } catch (error) {
      expect((error as KittenError).code).toBe("KEY_MISMATCH");
      expect((error as KittenError).message).toContain('"c1"');
    }
  });

  it("KeyRegistry.pin() race: two first pins with different keys, exactly one wins", async () => {
    for (let round = 0; round < 10; round++) {
      const registry = new KeyRegistry(temps.make());
      const [a, b] = [await newPublicPem(), await newPublicPem()];
      const results = await Promise.allSettled([registry.pin("c1", a), registry.pin("c1", b)]);
      const won = results.filter((r) => r.status === "fulfilled");
      const lost = results.filter((r) => r.status === "rejected");
      expect(won.length).toBe(1);
      expect((won[0] as PromiseFulfilledResult<string>).value).toBe("pinned");
      expect(((lost[0] as PromiseRejectedResult).reason as KittenError).code).toBe("KEY_MISMATCH");
      const winner = results[0]!.status === "fulfilled" ? a : b;
      expect((await new KeyRegistry(registry.directory).get("c1"))!.trim()).toBe(winner.trim());
      expect(await readdir(registry.directory)).toEqual(["c1.pub"]); // no temp file left behind
    }
  });

  it("KeyRegistry.pin() race across registries (two broker processes) also has one winner", async () => {
    const dir = temps.make();
    const pems = await Promise.all([1, 2, 3, 4].map(newPublicPem));
    const results = await Promise.allSettled(pems.map((pem) => new KeyRegistry(dir).pin("c1", pem)));
    expect(results.filter((r) => r.status === "fulfilled").length).toBe(1);
  });

  it("KeyRegistry.pin() race with the same key: one pinned, the other matches", async () => {
    const registry = new KeyRegistry(temps.make());
    const pem = await newPublicPem();
    const results = await Promise.all([registry.pin("c1", pem), registry.pin("c1", pem)]);
    expect(results.sort()).toEqual(["matches", "pinned"]);
  });

  it("KeyRegistry refuses traversal ids before touching the disk", async () => {
    const dir = temps.make();
    const registry = new KeyRegistry(join(dir, "clients"));
    const pem = await newPublicPem();
    for (const id of BAD_IDS) {
      expect(await codeOf(registry.pin(id, pem))).toBe("BAD_CLIENT_ID");
      expect(await codeOf(registry.get(id))).toBe("BAD_CLIENT_ID");
      expect(await codeOf(registry.unpin(id))).toBe("BAD_CLIENT_ID");
    }
    expect(await readdir(dir)).toEqual([]);
  });

  it("KeyRegistry.pin() refuses a key that is not an Ed25519 SPKI PEM with AUTH_FAILED", async () => {
    const registry = new KeyRegistry(temps.make());
    const ec = await generateKeyPair("ES256", { extractable: true });
    for (const pem of ["", "garbage", await exportSPKI(ec.publicKey), `${await newPublicPem()}${"x".repeat(2000)}`]) {
      expect(await codeOf(registry.pin("c1", pem))).toBe("AUTH_FAILED");
    }
    expect(await registry.list()).toEqual([]);
  });

  it("KeyRegistry.get() refuses a damaged pinned file with KEY_FILE_ERROR instead of re-pinning", async () => {
    const dir = temps.make();
    await writeFile(join(dir, "old.pub"), "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n");
    const registry = new KeyRegistry(dir);
    expect(await codeOf(registry.get("old"))).toBe("KEY_FILE_ERROR");
    expect(await codeOf(registry.pin("old", await newPublicPem()))).toBe("KEY_FILE_ERROR");
  });

  it("KeyRegistry.unpin() removes the pin so a new key can pin (rotation)", async () => {
    const registry = new KeyRegistry(temps.make());
    await registry.pin("c1", await newPublicPem());
    expect(await registry.unpin("c1")).toBe(true);
    expect(await registry.get("c1")).toBeNull();
    expect(await registry.unpin("c1")).toBe(false);
    const next = await newPublicPem();
    expect(await registry.pin("c1", next)).toBe("pinned");
    expect((await registry.get("c1"))!.trim()).toBe(next.trim());
  });

  it("KeyRegistry.forget() drops the cache after the file changed behind the broker", async () => {
    const registry = new KeyRegistry(temps.make());
    await registry.pin("c1", await newPublicPem());
    await rm(join(registry.directory, "c1.pub"));
    expect(await registry.get("c1")).not.toBeNull(); // cached
    registry.forget();
    expect(await registry.get("c1")).toBeNull();
  });

  it("KeyRegistry.list() returns pinned ids sorted, ignoring other files and a missing folder", async () => {
    const dir = temps.make();
    expect(await new KeyRegistry(join(dir, "missing")).list()).toEqual([]);
    const registry = new KeyRegistry(dir);
    await registry.pin("b", await newPublicPem());
    await registry.pin("a", await newPublicPem());
    await writeFile(join(dir, "notes.txt"), "x");
    await writeFile(join(dir, ".c1.123.tmp"), "x");
    await writeFile(join(dir, ".hidden.pub"), "x");
    expect(await registry.list()).toEqual(["a", "b"]);
  });
});
