import { afterEach, describe, expect, it } from "bun:test";
import { KittenError } from "../../src/protocol/errors.ts";
import { defaultConfig, parseConfig } from "../../src/server/mod.ts";
import { adminFixture, type Fixture } from "./_fixture.ts";
import { waitFor } from "../helpers/broker.ts";

let fixture: Fixture;
afterEach(async () => await fixture?.close());

const bearer = (token: string) => ({ headers: { Authorization: `Bearer ${token}` } });

function configProblems(input: Record<string, unknown>): { path: string; message: string }[] {
  try {
    parseConfig(input);
  } catch (error) {
    return (error as KittenError).details as { path: string; message: string }[];
  }
  return [];
}

describe("admin auth and config", () => {
  it("a non-loopback admin host requires the token: 401 without or with a wrong one, 200 with it", async () => {
    const f = fixture = adminFixture({ admin: { host: "0.0.0.0", token: "t0ken" } });
    for (const path of ["/status", "/queues", "/metrics", "/clients", "/config", "/nope"]) {
      const missing = await f.request(path);
      expect(missing.status).toBe(401);
      expect(missing.body.code).toBe("UNAUTHORIZED");
      expect(missing.headers.get("www-authenticate")).toContain("Bearer");
      expect((await f.request(path, bearer("wrong"))).status).toBe(401);
    }
    expect((await f.request("/reload", { method: "POST" })).status).toBe(401);
    expect((await f.request("/soft-stop", { method: "POST" })).status).toBe(401);
    expect(f.server.broker.stopping).toBe(false);
    expect((await f.request("/status", bearer("t0ken"))).status).toBe(200);
    expect((await f.request("/status", { headers: { Authorization: "bearer t0ken" } })).status).toBe(200);
  });

  it("GET / and GET /health stay public: the page holds no data, probes need no secret", async () => {
    const f = fixture = adminFixture({ admin: { host: "0.0.0.0", token: "t0ken" } });
    expect((await f.request("/")).status).toBe(200);
    expect((await f.request("/health")).status).toBe(200);
  });

  it("on loopback without a token the API is open; a token, once set, is required there too", async () => {
    fixture = adminFixture();
    expect((await fixture.request("/status")).status).toBe(200);
    await fixture.close();
    const f = fixture = adminFixture({ admin: { token: "t0ken" } });
    expect((await f.request("/status")).status).toBe(401);
    expect((await f.request("/status", bearer("t0ken"))).status).toBe(200);
  });

  it("an app served on a non-loopback host with no token refuses everything (fail closed)", async () => {
    // A reload may remove the token after start; the bound host does not change with it.
    const f = fixture = adminFixture({}, { host: "0.0.0.0" });
    const { status, body } = await f.request("/status");
    expect(status).toBe(401);
    expect(body.message).toContain("admin.token must be set");
  });

  it("the token is read per request: a reload rotates it", async () => {
    const f = fixture = adminFixture({ admin: { token: "old" } });
    f.server.broker.reload(parseConfig({ durability: "memory", admin: { token: "new" } })); // as started: no store
    expect((await f.request("/status", bearer("old"))).status).toBe(401);
    expect((await f.request("/status", bearer("new"))).status).toBe(200);
  });

  it("without a token, a non-loopback Host (DNS rebinding) and a cross-site POST (CSRF) are refused", async () => {
    const stops: number[] = [];
    const f = fixture = adminFixture({}, { stop: (graceMs: number) => stops.push(graceMs) });
    const rebound = await f.request("/status", { headers: { Host: "evil.example:8080" } });
    expect(rebound.status).toBe(403);
    expect(rebound.body.code).toBe("NOT_ALLOWED");
    expect((await f.request("/status", { headers: { Host: "127.0.0.1:8080" } })).status).toBe(200);
    expect((await f.request("/status", { headers: { Host: "[::1]:8080" } })).status).toBe(200);
    const csrf = await f.request("/soft-stop", { method: "POST", headers: { Host: "127.0.0.1:8080", Origin: "https://evil.example" } });
    expect(csrf.status).toBe(403);
    expect(csrf.body.message).toContain(`cross-site request from origin "https://evil.example"`);
    const same = await f.request("/soft-stop", { method: "POST", headers: { Host: "127.0.0.1:8080", Origin: "http://127.0.0.1:8080" } });
    expect(same.status).toBe(202);
    expect((await f.request("/soft-stop", { method: "POST" })).status).toBe(202); // the CLI sends no Origin
    await waitFor(() => stops.length >= 2, 2000, "both stops called");
    expect(stops).toEqual([30000, 30000]);
  });

  it("with a token, the token alone decides (any Host, any Origin)", async () => {
    const f = fixture = adminFixture({ admin: { token: "t0ken" } });
    const response = await f.request("/status", { headers: { Host: "broker.example:8080", Authorization: "Bearer t0ken" } });
    expect(response.status).toBe(200);
  });

  it("parseConfig() requires admin.token when admin.host is not loopback", () => {
    expect(configProblems({ admin: { host: "0.0.0.0" } })).toEqual([
      { path: "admin.token", message: expect.stringContaining(`admin.host is "0.0.0.0"`) },
    ]);
    expect(configProblems({ admin: { host: "10.0.0.5", token: "x" } })).toEqual([]);
    expect(configProblems({ admin: { host: "0.0.0.0" }, isManagementInterface: false })).toEqual([]);
    for (const host of ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"]) {
      expect(configProblems({ admin: { host } })).toEqual([]);
    }
  });

  it("parseConfig() merges admin key by key and validates each key", () => {
    const config = parseConfig({ admin: { token: "x" } });
    expect(config.admin).toEqual({ ...defaultConfig().admin, token: "x" });
    expect(defaultConfig().admin).toEqual({ host: "127.0.0.1", token: null, tls: null, idleTimeoutSeconds: 10 });
    const problems = configProblems({ admin: { idleTimeoutSeconds: 0, token: "", tls: { cert: "c" }, hots: "x" } });
    expect(problems.map((p) => p.path).sort()).toEqual(["admin.hots", "admin.idleTimeoutSeconds", "admin.tls.key", "admin.token"]);
    expect(problems.find((p) => p.path === "admin.hots")!.message).toContain(`did you mean "host"`);
  });

  it('parseConfig() accepts and drops a top-level "$comment" (init-conf documents keys there)', () => {
    const config = parseConfig({ $comment: ["documentation"], maxItemsInQueue: 3 });
    expect("$comment" in config).toBe(false);
    expect(config.maxItemsInQueue).toBe(3);
  });
});
