/**
 * The dashboard in a real browser (Debian's chromium, driven by playwright-core): the page
 * loads under its strict CSP without a script error, and its live numbers move when messages
 * flow through a real client; with a queue map (real etcd), its Groups panel. A screenshot goes
 * to .test-output/dashboard.png.
 */
import { afterAll, describe, expect, it } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "../../mod.ts";
import { type AdminServer, startAdmin } from "../../src/admin/mod.ts";
import { type BrokerServer, memoryLogger, parseConfig, startBroker } from "../../src/server/mod.ts";
import { encode } from "../../src/protocol/cbor.ts";
import { waitFor } from "../helpers/broker.ts";
import { testPrefix } from "../helpers/election.ts";
import { startEtcd } from "../helpers/etcd.ts";
import { testKeysDirectory } from "../helpers/keys.ts";
import type { Browser } from "playwright-core";

const CHROMIUM = "/usr/bin/chromium";
const HAS_CHROMIUM = existsSync(CHROMIUM);
if (!HAS_CHROMIUM) {
  console.warn(`skipped: the dashboard browser test needs ${CHROMIUM} (apt-get install -y chromium)`);
}

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await Promise.resolve(cleanup()).catch(() => {});
});

/** A broker with its admin API on free ports, stopped after the file. */
function startServed(overrides: Record<string, unknown> = {}): { server: BrokerServer; admin: AdminServer } {
  const dir = mkdtempSync(join(tmpdir(), "kitten-dashboard-"));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const config = parseConfig({
    socketServer: { port: 0 },
    httpServerPort: 0,
    durability: "memory",
    pollIntervalHTTP: 200,
    registeredClientsPath: join(dir, "clients"),
    dataDirectory: join(dir, "data"),
    keysDirectory: join(dir, "keys"), // the broker's own key pair: a move links two masters as peers
    ...overrides,
  });
  const server = startBroker(config, { logger: memoryLogger() });
  cleanups.push(() => server.stop());
  const admin = startAdmin(server);
  cleanups.push(() => admin.stop(true));
  return { server, admin };
}

let browser: Browser | null = null;
async function launch(): Promise<Browser> {
  if (browser) return browser;
  const { chromium } = await import("playwright-core");
  const launched = browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  cleanups.push(() => launched.close());
  return launched;
}

describe("dashboard", () => {
  it.skipIf(!HAS_CHROMIUM)("dashboard: live numbers change in headless Chromium when messages flow", async () => {
    // orders/v1 is durable, so its "On disk" cell has something to show.
    const { server, admin } = startServed({ prefetch: 2, channels: { "orders/v1": { durability: "fsync" } } });
    const browser = await launch();
    const page = await browser.newPage({ viewport: { width: 1360, height: 1100 } });
    const problems: string[] = [];
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
    page.on("console", (message) => message.type() === "error" && problems.push(`console: ${message.text()}`));
    await page.goto(admin.url);
    await page.waitForSelector("#live.on");
    expect(await page.textContent("#total-received")).toBe("0");

    const mq = new Client();
    cleanups.push(() => mq.disconnect());
    await mq.connect({ hosts: [`127.0.0.1:${server.port}@broker-1`], clientId: "dashboard-test", keysDirectory: testKeysDirectory });
    // A consumer that holds its deliveries (no ack), so "in flight" shows, and waiting messages for id 9.
    mq.consume("orders/v1/1", () => {}, { prefetch: 2 });
    for (let i = 0; i < 5; i++) await mq.send("orders/v1/1", { order: i, note: "<img src=x onerror=alert(1)>" });
    for (let i = 0; i < 3; i++) await mq.send("orders/v1/9", { waiting: i });

    // A function, not a string: the page's CSP forbids eval, and runs in the page, hence `globalThis`.
    const textContains = (selector: string, text: string) =>
      page.waitForFunction(
        ([s, t]) => ((globalThis as any).document.querySelector(s)?.textContent ?? "").includes(t),
        [selector, text] as const,
        { timeout: 10_000 },
      );
    const received = (n: number) => page.locator("#total-received").filter({ hasText: new RegExp(`^${n}$`) }).waitFor({ timeout: 10_000 });
    await received(8);
    const row = page.locator(`tr[data-queue="orders/v1"]`);
    expect(await row.locator(`[data-field="inflight"]`).textContent()).toBe("2");
    expect(await row.locator(`[data-field="waiting"]`).textContent()).toStartWith("3");
    expect(await row.locator(`[data-field="ready"]`).textContent()).toBe("3");
    expect(await row.locator(`[data-field="consumers"]`).textContent()).toBe("1");
    const disk = server.broker.diskUsage("orders/v1");
    expect(disk.messages).toBe(8);
    const shown = disk.bytes < 1024 ? `${disk.bytes} B` : `${(disk.bytes / 1024).toFixed(1)} KiB`;
    expect(await row.locator(`[data-field="disk"]`).textContent()).toBe(shown);
    expect(await page.textContent("#client-count")).toBe("1");

    // The message browser: open the queue, its messages, one message.
    await row.click();
    await page.click(`.tabs button[data-tab="messages"]`);
    await page.waitForSelector("#messages tbody tr");
    expect(await page.locator("#messages tbody tr").count()).toBe(8);
    await page.locator("#messages tbody tr").first().click();
    await textContains("#message", '"order"');
    expect(await page.textContent("#config")).toContain('"pollIntervalHTTP": 200');
    expect(await page.locator("img").count()).toBe(0); // bodies are shown as text, never as markup

    // Numbers keep moving: more traffic, more received.
    for (let i = 0; i < 4; i++) await mq.send("orders/v1/9", { later: i });
    await received(12);
    mkdirSync(".test-output", { recursive: true });
    await page.screenshot({ path: ".test-output/dashboard.png", fullPage: true });
    expect(problems).toEqual([]);
  }, 60_000);

  it.skipIf(!HAS_CHROMIUM)("dashboard: charts are full at first paint from the broker's history; a queue's page charts it and publishes", async () => {
    const { server, admin } = startServed();
    const mq = new Client();
    cleanups.push(() => mq.disconnect());
    await mq.connect({ hosts: [`127.0.0.1:${server.port}@broker-1`], clientId: "history-test", keysDirectory: testKeysDirectory });
    for (let i = 0; i < 20; i++) await mq.send("audit/v1/1", { event: i });
    // Three seconds of history before the page exists: a page that kept its own history would draw one point.
    await waitFor(() => server.broker.stats.history.broker.size >= 3, 10_000, "three history points");
    const page = await (await launch()).newPage({ viewport: { width: 1360, height: 1100 } });
    const problems: string[] = [];
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
    await page.goto(admin.url);
    await page.waitForSelector("#live.on");
    const line = async (selector: string) => {
      const points = (await page.getAttribute(selector, "points")) ?? "";
      const ys = points.split(" ").filter(Boolean).map((p) => Number(p.split(",")[1]));
      return { count: ys.length, flat: Math.min(...ys) === Math.max(...ys), lowest: Math.max(...ys), highest: Math.min(...ys) };
    };
    const received = await line(`#chart polyline[data-series="received"]`);
    expect(received.count).toBeGreaterThanOrEqual(3);
    expect(received.flat).toBe(false); // the 20 messages of the first second are drawn
    expect(await page.getAttribute(`#chart polyline[data-series="sent"]`, "stroke-dasharray")).not.toBe(
      await page.getAttribute(`#chart polyline[data-series="acked"]`, "stroke-dasharray"),
    );

    await page.locator(`tr[data-queue="audit/v1"]`).click();
    await page.waitForFunction(
      () => ((globalThis as any).document.querySelector(`#queue-chart polyline[data-series="received"]`)?.getAttribute("points") ?? "").split(" ").length >= 3,
      undefined,
      { timeout: 10_000 },
    );
    const queueReceived = await line(`#queue-chart polyline[data-series="received"]`);
    expect(queueReceived.flat).toBe(false);
    // 20 waiting from the first point on: the backlog line runs above the zero line, not on it.
    expect((await line(`#queue-chart polyline[data-series="backlog"]`)).lowest).toBeLessThan(queueReceived.lowest);

    await page.fill("#publish-body", "{not json");
    await page.click("#publish");
    expect(await page.textContent("#publish-result")).toStartWith("The body is not JSON");
    await page.fill("#publish-id", "7");
    await page.fill("#publish-body", `{"from": "the form"}`);
    await page.click("#publish");
    await page.locator("#publish-result").filter({ hasText: /^Published admin-/ }).waitFor({ timeout: 10_000 });
    expect(await page.textContent("#publish-result")).toContain("to audit/v1/7");
    expect(server.broker.queues.get("audit/v1")!.counters.received).toBe(21);
    mkdirSync(".test-output", { recursive: true });
    await page.screenshot({ path: ".test-output/dashboard-queue.png", fullPage: true });
    expect(problems).toEqual([]);
    await page.close();
  }, 60_000);

  it.skipIf(!HAS_CHROMIUM)("dashboard: asks for the admin token, then goes live with it", async () => {
    const { admin } = startServed({ admin: { token: "dash-token" } });
    const page = await (await launch()).newPage();
    await page.goto(admin.url);
    await page.waitForSelector("#token-dialog[open]");
    await page.fill("#token-input", "dash-token");
    await page.click("#token-form button[type=submit]");
    await page.waitForSelector("#live.on");
    expect(await page.textContent("#config")).toContain('"token": "(redacted)"');
    await page.close();
  }, 30_000);
  it.skipIf(!HAS_CHROMIUM)("dashboard: a master's cluster badge shows its in-sync set, and turns red with fewer brokers in sync than minInSyncReplicas", async () => {
    // The peer it names is not running: the master is alone in sync, below the 2 it asks for.
    const { admin } = startServed({ serviceId: "b0", cluster: { peers: ["127.0.0.1:1@b1"], minInSyncReplicas: 2 } });
    const page = await (await launch()).newPage();
    await page.goto(admin.url);
    await page.waitForSelector("#live.on");
    await page.waitForSelector("#cluster:not([hidden])");
    expect(await page.textContent("#cluster")).toBe("in sync 1 (min 2) · epoch 0");
    expect(await page.getAttribute("#cluster", "class")).toBe("badge stopping");
    expect(await page.getAttribute("#cluster", "title")).toBe("manual failover");
  }, 60_000);

  it.skipIf(!HAS_CHROMIUM)("dashboard: a lone broker shows no cluster badge", async () => {
    const { admin } = startServed();
    const page = await (await launch()).newPage();
    await page.goto(admin.url);
    await page.waitForSelector("#live.on");
    expect(await page.isHidden("#cluster")).toBe(true);
    // No queue map (no cluster.etcd): no Groups panel, no Group column.
    expect(await page.isHidden("#groups-panel")).toBe(true);
    expect(await page.isHidden(`#queues th.group-col`)).toBe(true);
  }, 60_000);

  it.skipIf(!HAS_CHROMIUM)("dashboard: with a queue map, a Groups panel lists each group's brokers and queues, queue rows name their group, and Move… moves a queue", async () => {
    const etcd = await startEtcd();
    cleanups.push(() => etcd.cleanup());
    const prefix = testPrefix();
    const channels = { "a/v1": { group: "g1" }, "b/v1": { group: "g2" } };
    const served = ["g1", "g2"].map((group) =>
      startServed({
        serviceId: `${group}-1`,
        socketServer: { port: 0, host: "127.0.0.1" },
        channels,
        cluster: { peers: [], minInSyncReplicas: 1, group, etcd: { endpoints: etcd.endpoints, leaseTtlSeconds: 2, prefix } },
      })
    );
    const [g1, g2] = served as [ReturnType<typeof startServed>, ReturnType<typeof startServed>];
    await waitFor(() => {
      const groups = g1.server.broker.placement.status()!.groups;
      return g1.server.broker.isMaster && groups.g1?.queues.length === 1 && groups.g2?.queues.length === 1 && groups.g2.brokers.length === 1;
    }, 15_000, "g1 sees both groups and both queues placed");
    const broker = g1.server.broker;
    await broker.send("a/v1/1", "m-1", encode({ hello: 1 }), { clientId: "sender", grants: broker.rules.forClient("sender") });

    const page = await (await launch()).newPage({ viewport: { width: 1360, height: 1100 } });
    const problems: string[] = [];
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
    await page.goto(g1.admin.url);
    await page.waitForSelector("#live.on");
    await page.waitForSelector(`tr[data-queue="a/v1"]`);
    expect(await page.isVisible("#groups-panel")).toBe(true);
    expect(await page.textContent("#own-group")).toBe("g1");
    const row = (group: string, field: string) => page.locator(`#groups tr[data-group="${group}"] [data-field="${field}"]`).textContent();
    expect(await row("g1", "name")).toBe("g1 (this broker)");
    expect(await row("g1", "brokers")).toBe(`127.0.0.1:${g1.server.port}@g1-1`);
    const queuesOf = (group: string) => page.locator(`#groups tr[data-group="${group}"] .queue-name`).allTextContents();
    expect(await queuesOf("g1")).toEqual(["a/v1"]);
    expect(await row("g2", "brokers")).toBe(`127.0.0.1:${g2.server.port}@g2-1`);
    expect(await queuesOf("g2")).toEqual(["b/v1"]);
    expect(await row("g2", "count")).toBe("1");
    expect(await page.isVisible(`#queues th.group-col`)).toBe(true);
    expect(await page.locator(`tr[data-queue="a/v1"] [data-field="group"]`).textContent()).toBe("g1");
    expect(await page.isVisible("#moves-empty")).toBe(true);

    // Move… on a/v1: the dialog offers the other group; the move runs and the Moves list follows it.
    await page.click(`#groups [data-queue="a/v1"] button.move`);
    expect(await page.textContent("#move-queue")).toBe("a/v1");
    expect(await page.locator("#move-to option").allTextContents()).toEqual(["g2"]);
    mkdirSync(".test-output", { recursive: true });
    await page.screenshot({ path: ".test-output/dashboard-move.png" });
    await page.click("#move-go");
    await page.waitForSelector("#move-dialog", { state: "hidden" });
    await page.locator(`#moves tr[data-move="a/v1"] [data-field="state"]`).filter({ hasText: /^done$/ }).waitFor({ timeout: 20_000 });
    await page.locator(`#groups tr[data-group="g2"] .queue-name`).filter({ hasText: /^a\/v1$/ }).waitFor({ timeout: 10_000 });
    expect(await page.locator('#moves tr[data-move="a/v1"] td').first().textContent()).toBe("a/v1");
    expect(await page.locator('#moves tr[data-move="a/v1"] td').nth(1).textContent()).toBe("g1 → g2");
    expect(await page.textContent('#moves tr[data-move="a/v1"] [data-field="copied"]')).toBe("1 / 1");
    expect(await page.textContent('#moves tr[data-move="a/v1"] [data-field="fence"]')).toMatch(/^\d+ ms$/);
    expect(g2.server.broker.queues.get("a/v1")?.held).toBe(1);
    await page.screenshot({ path: ".test-output/dashboard-groups.png", fullPage: true });
    expect(problems).toEqual([]);
    await page.close();
  }, 60_000);
});
