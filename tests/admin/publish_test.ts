import { afterEach, describe, expect, it } from "bun:test";
import { adminFixture, type Fixture } from "./_fixture.ts";

let fixture: Fixture;
afterEach(async () => await fixture?.close());

const publish = (f: Fixture, body: unknown) =>
  f.request("/publish", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

describe("POST /publish", () => {
  it("POST /publish queues a message a consumer then receives", async () => {
    const f = fixture = adminFixture();
    const worker = f.subscribe(f.session("worker"), "consume", "orders/v1", ["*"]);
    const reply = await publish(f, { channel: "orders/v1/42", body: { order: 42 } });
    expect(reply.status).toBe(201);
    expect(reply.body).toMatchObject({ channel: "orders/v1/42", queue: "orders/v1" });
    expect(reply.body.messageId).toStartWith("admin-");
    expect(worker.inflight.size).toBe(1);
    const shown = await f.request(`/queues/orders/v1/messages/${reply.body.messageId}`);
    expect(shown.body.body).toEqual({ order: 42 });
  });

  it("POST /publish checks the channel's format and names the field", async () => {
    const f = fixture = adminFixture({ channels: { "orders/v1": { map: { order: ["int"] } } } });
    const bad = await publish(f, { channel: "orders/v1/1", body: { order: "x" } });
    expect(bad.status).toBe(422);
    expect(bad.body.code).toBe("BAD_FORMAT");
    expect(bad.body.message).toContain("order");
    expect((await publish(f, { channel: "orders/v1/1", body: { order: 1 } })).status).toBe(201);
  });

  it("POST /publish applies the rules to the admin identity kitten-mq-admin", async () => {
    const f = fixture = adminFixture({
      rules: [{ client: "kitten-mq-admin", read: [], write: ["orders/*"] }, { client: "other", read: ["billing/*"], write: ["billing/*"] }],
    });
    const refused = await publish(f, { channel: "billing/v1/1", body: 1 });
    expect(refused.status).toBe(403);
    expect(refused.body.code).toBe("NOT_ALLOWED");
    expect(refused.body.message).toContain("kitten-mq-admin");
    expect((await publish(f, { channel: "orders/v1/1", body: 1 })).status).toBe(201);
  });

  it("POST /publish refuses bad requests with a coded message", async () => {
    const f = fixture = adminFixture({ socketServer: { port: 0, maxFrameSize: 1024 } });
    const notJson = await f.request("/publish", { method: "POST", body: "{oops" });
    expect(notJson.status).toBe(400);
    expect(notJson.body.message).toStartWith("Cannot publish: the request body is not JSON");
    const noChannel = await publish(f, { body: 1 });
    expect(noChannel.body).toMatchObject({ code: "BAD_REQUEST" });
    expect(noChannel.body.message).toContain("channel");
    const noBody = await publish(f, { channel: "orders/v1/1" });
    expect(noBody.body.message).toBe(`Cannot publish to "orders/v1/1": body is missing`);
    const badChannel = await publish(f, { channel: "orders", body: 1 });
    expect(badChannel.body.code).toBe("BAD_CHANNEL");
    const large = await publish(f, { channel: "orders/v1/1", body: "x".repeat(2000) });
    expect(large.status).toBe(400);
    expect(large.body.message).toContain("maxFrameSize");
  });
});
