import { afterEach, describe, expect, it } from "bun:test";
import { adminFixture, type Fixture, writeConfig } from "./_fixture.ts";
import { waitFor } from "../helpers/broker.ts";
import { PREVIEW_MAX_BYTES } from "../../src/admin/display.ts";

let fixture: Fixture;
afterEach(async () => await fixture?.close());

function open(overrides: Record<string, unknown> = {}, options = {}): Fixture {
  fixture = adminFixture(overrides, options);
  return fixture;
}

describe("admin app", () => {
  it("GET /health answers ok, and 503 stopping once soft-stop began", async () => {
    const f = open();
    expect(await f.request("/health")).toMatchObject({ status: 200, body: { status: "ok" } });
    f.server.broker.stopAccepting();
    expect(await f.request("/health")).toMatchObject({ status: 503, body: { status: "stopping" } });
  });

  it("GET /status gives role, counters, totals and real rates", async () => {
    const f = open();
    await f.send("orders/v1/1", { n: 1 });
    await f.send("orders/v1/2", { n: 2 });
    f.clock.advance(2000);
    const { status, body } = await f.request("/status");
    expect(status).toBe(200);
    expect(body).toMatchObject({
      serviceId: "broker-1",
      role: "master",
      stopping: false,
      uptimeSeconds: 2,
      configPath: f.configPath,
      queues: 1,
      messages: { ready: 0, inflight: 0, delayed: 0, waiting: 2 },
      counters: { received: 2, sent: 0, acked: 0 },
      rates: { received: 1, sent: 0, acked: 0 },
    });
  });

  it("GET /config shows the running config with every token redacted", async () => {
    const f = open({ socketServer: { port: 0, token: "client-secret" }, admin: { token: "admin-secret" } });
    const { status, body, text } = await f.request("/config", { headers: { Authorization: "Bearer admin-secret" } });
    expect(status).toBe(200);
    expect(body.config.socketServer.token).toBe("(redacted)");
    expect(body.config.admin.token).toBe("(redacted)");
    expect(text).not.toContain("secret");
    expect(f.server.broker.config.admin.token).toBe("admin-secret"); // the running config is untouched
  });

  it("GET /queues lists every queue with depths, counters and handler counts", async () => {
    const f = open();
    expect((await f.request("/queues")).body).toEqual({ queues: [] });
    await f.send("orders/v1/1", "a");
    f.subscribe(f.session("worker"), "consume", "orders/v1", ["2"]);
    const { body } = await f.request("/queues");
    expect(body.queues).toHaveLength(1);
    expect(body.queues[0]).toMatchObject({
      name: "orders/v1",
      depth: { ready: 0, inflight: 0, delayed: 0, waiting: 1 },
      counters: { received: 1 },
      consumers: 1,
      listeners: 0,
      settings: { prefetch: 1, maxItemsInQueue: 1000 },
    });
  });

  it("GET /queues/:endpoint/:version and /queues/endpoint%2Fversion give depths per id and handlers", async () => {
    const f = open();
    const worker = f.session("worker-1");
    f.subscribe(worker, "consume", "orders/v1", ["1"], 1);
    f.subscribe(f.session("audit"), "listen", "orders/v1", ["1"]);
    await f.send("orders/v1/1", "first");
    await f.send("orders/v1/1", "second");
    await f.send("orders/v1/9", "nobody consumes 9");
    const direct = await f.request("/queues/orders/v1");
    const encoded = await f.request("/queues/orders%2Fv1");
    expect(direct.status).toBe(200);
    expect(encoded.body).toEqual(direct.body);
    const { body } = direct;
    expect(body.ids).toEqual([
      // The consumer holds one (prefetch 1) and one is ready; the listener holds its two copies.
      { id: "1", ready: 1, inflight: 3, delayed: 0, waiting: 0 },
      { id: "9", ready: 0, inflight: 0, delayed: 0, waiting: 1 },
    ]);
    expect(body.consumers).toEqual([
      { clientId: "worker-1", kind: "consume", group: "consume", sub: expect.any(Number), ids: ["1"], prefetch: 1, inflight: 1 },
    ]);
    expect(body.listeners).toMatchObject([{ clientId: "audit", kind: "listen", group: "listen:audit", ids: ["1"], inflight: 2 }]);
    expect(body.live).toBe(3);
  });

  it("GET /queues/... answers 404 for an unknown queue and does not create it", async () => {
    const f = open();
    for (const path of ["/queues/nope/v1", "/queues/nope%2Fv1/messages", "/queues/nope/v1/messages/x"]) {
      const { status, body } = await f.request(path);
      expect(status).toBe(404);
      expect(body).toEqual({ code: "NOT_FOUND", message: expect.stringContaining(`"nope/v1"`) });
    }
    expect((await f.request("/queues/nope/v1", { method: "DELETE" })).status).toBe(404);
    expect(f.server.broker.queues.size).toBe(0);
  });

  it("GET /queues/:name without a version answers 404 naming the expected form", async () => {
    const f = open();
    const { status, body } = await f.request("/queues/orders");
    expect(status).toBe(404);
    expect(body.message).toContain(`"endpoint/version"`);
  });

  it("GET /queues/:queue/messages pages through live copies with a body preview", async () => {
    const f = open();
    for (let i = 0; i < 5; i++) await f.send(`orders/v1/${i}`, { index: i, note: "x".repeat(300) }, `msg-${i}`);
    const { status, body } = await f.request("/queues/orders/v1/messages?limit=2&offset=1");
    expect(status).toBe(200);
    expect(body).toMatchObject({ queue: "orders/v1", total: 5, limit: 2, offset: 1 });
    expect(body.messages.map((m: { messageId: string }) => m.messageId)).toEqual(["msg-1", "msg-2"]);
    expect(body.messages[0]).toMatchObject({
      channel: "orders/v1/1",
      destination: "1",
      state: "waiting",
      deliveries: 0,
      created: f.clock.now,
      group: null,
    });
    expect(body.messages[0].preview).toStartWith(`{"index":1,"note":"xxx`);
    expect(body.messages[0].preview.length).toBeLessThanOrEqual(200);
    expect((await f.request("/queues/orders/v1/messages")).body.messages).toHaveLength(5); // default limit 50
  });

  it("GET /queues/:queue/messages does not decode a large body for its preview; GET of the message shows it", async () => {
    const f = open();
    const big = { blob: "y".repeat(PREVIEW_MAX_BYTES) };
    await f.send("orders/v1/big", big, "msg-big");
    const { body } = await f.request("/queues/orders/v1/messages");
    expect(body.messages[0].preview).toMatch(/^\(\d+ bytes: open the message to see it\)$/);
    expect(body.messages[0].size).toBeGreaterThan(PREVIEW_MAX_BYTES);
    expect((await f.request("/queues/orders/v1/messages/msg-big")).body.body).toEqual(big);
  });

  it("GET /queues/:queue/messages answers 400 for a bad limit or offset", async () => {
    const f = open();
    await f.send("orders/v1/1", "a");
    for (const query of ["limit=abc", "limit=0", "limit=1001", "limit=1.5", "offset=-1", "offset=x", "limit="]) {
      const { status, body } = await f.request(`/queues/orders/v1/messages?${query}`);
      expect(status).toBe(400);
      expect(body.code).toBe("BAD_REQUEST");
      expect(body.message).toContain(query.split("=")[0]!);
    }
  });

  it("GET /queues/:queue/messages/:id shows the full body and every copy; unknown ids are 404", async () => {
    const f = open();
    f.subscribe(f.session("a"), "listen", "orders/v1", ["7"]);
    f.subscribe(f.session("b"), "listen", "orders/v1", ["7"]);
    await f.send("orders/v1/7", { total: 12.5, bytes: new Uint8Array([1, 2]) }, "id/with space");
    const { status, body } = await f.request(`/queues/orders/v1/messages/${encodeURIComponent("id/with space")}`);
    expect(status).toBe(200);
    expect(body).toMatchObject({ messageId: "id/with space", queue: "orders/v1", body: { total: 12.5, bytes: { $bytes: "AQI=" } } });
    expect(body.copies.map((c: { group: string }) => c.group).sort()).toEqual(["listen:a", "listen:b"]);
    expect(body.copies.every((c: { state: string }) => c.state === "inflight")).toBe(true);
    const missing = await f.request("/queues/orders/v1/messages/nope");
    expect(missing).toMatchObject({ status: 404, body: { code: "NOT_FOUND" } });
  });

  it("DELETE /queues/:queue purges ready, delayed and waiting copies but not in-flight ones", async () => {
    const f = open();
    const worker = f.subscribe(f.session("w"), "consume", "orders/v1", ["1"], 1);
    await f.send("orders/v1/1", "in flight");
    await f.send("orders/v1/1", "ready");
    await f.send("orders/v1/2", "waiting");
    const queue = f.server.broker.queues.get("orders/v1")!;
    expect(queue.live).toBe(3);
    const { status, body } = await f.request("/queues/orders%2Fv1", { method: "DELETE" });
    expect(status).toBe(200);
    expect(body).toEqual({ queue: "orders/v1", id: null, purged: 2 });
    const list = await f.request("/queues/orders/v1/messages");
    expect(list.body.messages.map((m: { state: string }) => m.state)).toEqual(["inflight"]);
    expect(queue.live).toBe(1);
    f.ackAll(worker);
    expect(queue.live).toBe(0);
    expect(f.logger.lines.some((line) => line.includes("purged=2"))).toBe(true);
  });

  it("DELETE /queues/:queue?id= purges one destination id only; an empty id is 400", async () => {
    const f = open();
    await f.send("orders/v1/1", "a");
    await f.send("orders/v1/2", "b");
    await f.send("orders/v1/2", "c");
    expect((await f.request("/queues/orders/v1?id=2", { method: "DELETE" })).body).toEqual({ queue: "orders/v1", id: "2", purged: 2 });
    expect((await f.request("/queues/orders/v1")).body.ids).toEqual([{ id: "1", ready: 0, inflight: 0, delayed: 0, waiting: 1 }]);
    expect((await f.request("/queues/orders/v1?id=", { method: "DELETE" })).status).toBe(400);
  });

  it("an unknown route answers 404 JSON", async () => {
    const f = open();
    expect(await f.request("/nope")).toMatchObject({ status: 404, body: { code: "NOT_FOUND" } });
    expect((await f.request("/statistics/")).status).toBe(404);
    expect((await f.request("/queues", { method: "POST" })).status).toBe(404);
  });

  it("a failure inside a route answers 500 JSON and the broker keeps running", async () => {
    const f = open();
    Object.defineProperty(f.server.broker, "registry", { value: { list: () => Promise.reject(new Error("disk on fire")) } });
    const { status, body } = await f.request("/clients");
    expect(status).toBe(500);
    expect(body).toEqual({ code: "INTERNAL", message: "Cannot GET /clients: internal error: disk on fire" });
    expect(f.logger.lines.some((line) => line.includes("disk on fire"))).toBe(true);
    expect((await f.request("/health")).status).toBe(200);
  });

  it("POST /reload applies a good file and answers with the new config", async () => {
    const f = open();
    const { dataDirectory, registeredClientsPath } = f.server.broker.config; // a new dataDirectory needs a restart
    writeConfig(f, { socketServer: { port: 0 }, httpServerPort: 0, durability: "memory", dataDirectory, registeredClientsPath, maxItemsInQueue: 7 });
    const { status, body } = await f.request("/reload", { method: "POST" });
    expect(status).toBe(200);
    expect(body).toMatchObject({ reloaded: true, configPath: f.configPath, config: { maxItemsInQueue: 7 } });
    expect(f.server.broker.config.maxItemsInQueue).toBe(7);
  });

  it("POST /reload with a bad file lists every problem and changes nothing", async () => {
    const f = open({ maxItemsInQueue: 5 });
    const before = f.server.broker.config;
    writeConfig(f, { maxItemsInQueue: 0, requeueLimit: "x", admin: { host: "0.0.0.0" } });
    const { status, body } = await f.request("/reload", { method: "POST" });
    expect(status).toBe(400);
    expect(body.code).toBe("CONFIG_INVALID");
    expect(body.message).toContain("3 problems");
    expect(body.details.map((p: { path: string }) => p.path).sort()).toEqual(["admin.token", "maxItemsInQueue", "requeueLimit"]);
    expect(f.server.broker.config).toBe(before);
    expect(f.server.broker.config.maxItemsInQueue).toBe(5);
  });

  it("POST /soft-stop and POST /stop answer 202 and run the stop in the background", async () => {
    const calls: [number, string][] = [];
    const f = open({}, { stop: (graceMs: number, reason: string) => calls.push([graceMs, reason]) });
    expect(await f.request("/soft-stop", { method: "POST" })).toMatchObject({ status: 202, body: { stopping: true, graceMs: 30000 } });
    expect(await f.request("/stop", { method: "POST" })).toMatchObject({ status: 202, body: { graceMs: 5000 } });
    expect(calls).toEqual([]); // not before the reply is out
    await waitFor(() => calls.length === 2, 2000, "both stops called");
    expect(calls.map(([grace]) => grace)).toEqual([30000, 5000]);
    expect((await f.request("/soft-stop")).status).toBe(404); // GET is not a way to stop a broker
  });

  it("POST /soft-stop without a stop handler soft-stops the broker server", async () => {
    const f = open();
    expect((await f.request("/soft-stop", { method: "POST" })).status).toBe(202);
    await waitFor(() => f.logger.lines.some((line) => line.includes("stopped")), 2000, 'the broker logs "stopped"');
    expect(f.server.broker.stopping).toBe(true);
    expect(f.logger.lines.some((line) => line.includes("stopped"))).toBe(true);
  });

  it("GET / serves the dashboard page with its poll interval and a strict CSP", async () => {
    const f = open({ pollIntervalHTTP: 750 });
    const response = await f.app.request("/");
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toStartWith("text/html");
    const csp = response.headers.get("content-security-policy")!;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toMatch(/script-src 'sha256-[A-Za-z0-9+/=]+'/);
    const html = await response.text();
    expect(html).toContain(`"pollInterval":750`);
    expect(html).not.toMatch(/<(script|link|img)[^>]+(src|href)="(?!data:)/); // no external asset
    // The CSP hash must match the inline script exactly, or the browser would block it.
    const script = /<script>([\s\S]*?)<\/script>/.exec(html)![1]!;
    const hash = new Bun.CryptoHasher("sha256").update(script).digest("base64");
    expect(csp).toContain(`'sha256-${hash}'`);
  });
});
