import { afterEach, describe, expect, it } from "bun:test";
import { adminFixture, type Fixture } from "./_fixture.ts";

let fixture: Fixture;
afterEach(async () => await fixture?.close());

async function publicKeyPem(): Promise<string> {
  const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"]) as unknown as CryptoKeyPair;
  const spki = Buffer.from(await crypto.subtle.exportKey("spki", pair.publicKey)).toString("base64");
  return `-----BEGIN PUBLIC KEY-----\n${spki}\n-----END PUBLIC KEY-----\n`;
}

describe("admin clients", () => {
  it("GET /clients lists connected sessions with their registrations, and pinned keys", async () => {
    const f = fixture = adminFixture();
    await f.server.broker.registry.pin("alice", await publicKeyPem());
    await f.server.broker.registry.pin("bob", await publicKeyPem());
    const alice = f.session("alice");
    f.subscribe(alice, "consume", "orders/v1", ["1", "2"], 1);
    f.subscribe(alice, "listen", "audit/v1", ["*"]);
    const { status, body } = await f.request("/clients");
    expect(status).toBe(200);
    expect(body.clients).toEqual([{
      clientId: "alice",
      state: "open",
      unsentBytes: 0,
      pinned: true,
      subscriptions: [
        { queue: "orders/v1", kind: "consume", group: "consume", sub: expect.any(Number), ids: ["1", "2"], prefetch: 1, inflight: 0 },
        { queue: "audit/v1", kind: "listen", group: "listen:alice", sub: expect.any(Number), ids: ["*"], prefetch: 1000, inflight: 0 },
      ],
    }]);
    expect(body.pinned).toEqual([{ clientId: "alice", connected: true }, { clientId: "bob", connected: false }]);
  });

  it("DELETE /clients/:id/key un-pins the key; a second time it is 404", async () => {
    const f = fixture = adminFixture();
    await f.server.broker.registry.pin("alice", await publicKeyPem());
    expect(await f.request("/clients/alice/key", { method: "DELETE" })).toMatchObject({
      status: 200,
      body: { clientId: "alice", unpinned: true },
    });
    expect(await f.server.broker.registry.list()).toEqual([]);
    // The next connection of alice may pin a new key (rotation).
    expect(await f.server.broker.registry.pin("alice", await publicKeyPem())).toBe("pinned");
    await f.server.broker.registry.unpin("alice");
    const again = await f.request("/clients/alice/key", { method: "DELETE" });
    expect(again).toMatchObject({ status: 404, body: { code: "NOT_FOUND" } });
  });

  it("DELETE /clients/:id/key leaves the client's open sessions alone (rotation: it must not re-pin its old key)", async () => {
    const f = fixture = adminFixture();
    await f.server.broker.registry.pin("alice", await publicKeyPem());
    const alice = f.session("alice");
    expect(await f.request("/clients/alice/key", { method: "DELETE" })).toMatchObject({ status: 200 });
    expect(alice.state).toBe("open");
    expect(await f.server.broker.registry.list()).toEqual([]);
  });

  it("DELETE /clients/:id/key refuses an id that is not a client id (no path tricks) with 400", async () => {
    const f = fixture = adminFixture();
    for (const id of ["..%2F..%2Fetc%2Fpasswd", ".hidden", "a%20b"]) {
      const { status, body } = await f.request(`/clients/${id}/key`, { method: "DELETE" });
      expect(status).toBe(400);
      expect(body.code).toBe("BAD_CLIENT_ID");
    }
  });
});
