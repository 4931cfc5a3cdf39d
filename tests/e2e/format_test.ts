import { afterEach, expect, it } from "bun:test";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { client, type KittenError } from "../../mod.ts";
import { Cleanup, type Received, recorder, waitFor } from "../helpers/broker.ts";
import { testKeysDirectory } from "../helpers/keys.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

const INVOICE = {
  "invoice/v1": {
    map: {
      id: ["int", "min", 1],
      paid: ["binary", "toBoolean"],
      total: ["decimal", "toNumber"],
      customer: ["object", { email: ["email"] }],
      lines: ["array", "min", 1, { amount: ["number", "min", 0] }],
    },
  },
};

it("e2e: a send that does not match the channel format is refused with BAD_FORMAT and every issue", async () => {
  const broker = cleanup.broker({ channels: INVOICE });
  const mq = await cleanup.client(broker);
  const error = await mq.send("invoice/v1/42", {
    id: 0,
    paid: "maybe",
    total: "12.5",
    customer: { email: "not-an-email" },
    lines: [{ amount: -1 }],
  }).then(() => null, (e: KittenError) => e);
  expect(error?.code).toBe("BAD_FORMAT");
  expect(error?.message).toContain(`"invoice/v1/42"`);
  expect(error?.message).not.toContain("${");
  const issues = error?.details as { field: string; index: number | null; value?: unknown; error: string }[];
  expect(issues.map((issue) => issue.field).sort()).toEqual(["customer[email]", "id", "lines[0][amount]", "paid"]);
  expect(issues.find((issue) => issue.field === "id")).toMatchObject({ index: null, value: 0 });
  expect(issues.find((issue) => issue.field === "lines[0][amount]")).toMatchObject({ index: 0, value: -1 });
  for (const issue of issues) expect(issue.error).not.toContain("${");
  expect(broker.broker.queues.get("invoice/v1")?.counters.received ?? 0).toBe(0);
});

it("e2e: consumers receive the converted values of a channel with converters", async () => {
  const broker = cleanup.broker({ channels: INVOICE });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.consume("invoice/v1/*", recorder(got)).ready;
  await mq.send("invoice/v1/42", {
    id: 7,
    paid: "1",
    total: "12.50",
    customer: { email: "a@b.fr" },
    lines: [{ amount: 3 }],
    extra: "kept",
  });
  await waitFor(() => got.length === 1);
  expect(got[0]!.message).toEqual({
    id: 7,
    paid: true,
    total: 12.5,
    customer: { email: "a@b.fr" },
    lines: [{ amount: 3 }],
    extra: "kept",
  });
});

it("e2e: channels without a map accept any body unchanged", async () => {
  const broker = cleanup.broker({ channels: INVOICE });
  const mq = await cleanup.client(broker);
  const got: Received[] = [];
  await mq.consume("free/v1/*", recorder(got)).ready;
  await mq.send("free/v1/1", { anything: ["goes", 1, null] });
  await waitFor(() => got.length === 1);
  expect(got[0]!.message).toEqual({ anything: ["goes", 1, null] });
});

it("e2e: a root array format refuses an element with its index", async () => {
  const broker = cleanup.broker({ channels: { "batch/v1": { map: [{ sku: ["alphanumeric"], qty: ["int"] }] } } });
  const mq = await cleanup.client(broker);
  await mq.send("batch/v1/1", [{ sku: "A1", qty: 2 }]);
  const error = await mq.send("batch/v1/1", [{ sku: "A1", qty: 2 }, { sku: "B-2", qty: 1.5 }])
    .then(() => null, (e: KittenError) => e);
  expect(error?.code).toBe("BAD_FORMAT");
  const issues = error?.details as { field: string; index: number | null }[];
  expect(issues).toEqual([
    expect.objectContaining({ field: "sku", index: 1 }),
    expect.objectContaining({ field: "qty", index: 1 }),
  ]);
});

it("e2e: messages that expire by ttl are dead-lettered with their reason", async () => {
  const broker = cleanup.broker({
    channels: { "ttl/v1": { ttl: 0.1, deadLetter: "ttl-dead/v1" } },
  });
  const mq = await cleanup.client(broker);
  await mq.send("ttl/v1/nobody", { late: true });
  const dead: Received[] = [];
  await mq.consume("ttl-dead/v1/*", recorder(dead)).ready;
  await waitFor(() => dead.length === 1);
  expect(dead[0]!.message).toEqual({ late: true });
  expect(dead[0]!.info.channel.id).toBe("nobody");
  expect(dead[0]!.info.deadLetter).toMatchObject({ reason: "ttl", channel: "ttl/v1/nobody" });
  expect(broker.broker.queues.get("ttl/v1")!.counters.expired).toBe(1);
});

it("e2e: messages dropped by overflow are dead-lettered, oldest first", async () => {
  const broker = cleanup.broker({
    channels: { "full/v1": { maxItemsInQueue: 2, deadLetter: "full-dead/v1" } },
  });
  const mq = await cleanup.client(broker);
  for (const n of [1, 2, 3, 4]) await mq.send("full/v1/nobody", { n });
  const dead: Received[] = [];
  await mq.consume("full-dead/v1/*", recorder(dead)).ready;
  await waitFor(() => dead.length === 2);
  expect(dead.map((r) => r.message)).toEqual([{ n: 1 }, { n: 2 }]);
  expect(dead.every((r) => r.info.deadLetter?.reason === "overflow")).toBe(true);
  const live: Received[] = [];
  await mq.consume("full/v1/nobody", recorder(live)).ready;
  await waitFor(() => live.length === 2);
  expect(live.map((r) => r.message)).toEqual([{ n: 3 }, { n: 4 }]);
});

it("e2e: messages past requeueLimit are dead-lettered with reason requeueLimit and their delivery count", async () => {
  const broker = cleanup.broker({
    channels: { "poison/v1": { requeueLimit: 2, deadLetter: "poison-dead/v1" } },
  });
  const mq = await cleanup.client(broker);
  const dead: Received[] = [];
  await mq.consume("poison-dead/v1/*", recorder(dead)).ready;
  await mq.consume("poison/v1/*", (err, _message, done) => {
    if (!err) done(false);
  }).ready;
  await mq.send("poison/v1/9", "boom");
  await waitFor(() => dead.length === 1);
  expect(dead[0]!.info.deadLetter).toMatchObject({ reason: "requeueLimit", channel: "poison/v1/9", deliveries: 2 });
});

it("e2e: SIGUSR2 with a bad channel format keeps the running format; a good one applies to the next send", async () => {
  const dir = mkdtempSync(join(tmpdir(), "kitten-reload-"));
  cleanup.defer(() => rmSync(dir, { recursive: true, force: true }));
  const configPath = join(dir, "kitten-mq.config.json");
  const write = (map: unknown) =>
    writeFileSync(configPath, JSON.stringify({
      socketServer: { port: 0 },
      isManagementInterface: false,
      channels: { "order/v1": { map } },
    }));
  write({ qty: ["int"] });
  const child = spawn(process.execPath, ["src/cli/main.ts", "start", "--config", configPath], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  cleanup.defer(() => child.kill("SIGKILL"));
  let output = "";
  child.stdout.on("data", (chunk) => (output += chunk));
  child.stderr.on("data", (chunk) => (output += chunk));
  await waitFor(() => /listening on [^:]+:\d+/.test(output), 10_000);
  const port = Number(/listening on [^:]+:(\d+)/.exec(output)![1]);

  const mq = cleanup.add(client());
  await mq.connect({ hosts: [`127.0.0.1:${port}@broker-1`], clientId: "reloader", keysDirectory: testKeysDirectory });
  const refusal = (body: unknown) => mq.send("order/v1/1", body).then(() => null, (e: KittenError) => e.code);
  expect(await refusal({ qty: "x" })).toBe("BAD_FORMAT");

  write({ qty: ["nonsense-type"] });
  child.kill("SIGUSR2");
  await waitFor(() => output.includes("reload refused"), 5000);
  expect(output).toContain(`channels["order/v1"].map.qty`);
  expect(await refusal({ qty: "x" })).toBe("BAD_FORMAT"); // the old format still applies

  write({ qty: ["string"] });
  child.kill("SIGUSR2");
  await waitFor(() => output.includes("reloaded"), 5000);
  expect(await refusal({ qty: "x" })).toBe(null);
  expect(await refusal({ qty: 3 })).toBe("BAD_FORMAT");
});
