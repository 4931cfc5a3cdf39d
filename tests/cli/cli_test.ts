import { afterAll, beforeAll, describe, expect, it } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "../../mod.ts";
import { waitFor } from "../helpers/broker.ts";
import { testKeysDirectory } from "../helpers/keys.ts";
import { TempDirs } from "../helpers/temp_dir.ts";
import { type BrokerProcess, baseConfig, cli, startBrokerProcess } from "./_broker.ts";

// One broker for the read-only and purge commands; the stop commands get their own.
let broker: BrokerProcess;
let mq: Client;
const CLIENT_ID = `cli-test-${process.pid}`;

beforeAll(async () => {
  broker = await startBrokerProcess();
  mq = new Client();
  await mq.connect({ hosts: [broker.host], clientId: CLIENT_ID, keysDirectory: testKeysDirectory });
  for (let i = 0; i < 3; i++) await mq.send(`orders/v1/${i}`, { order: i });
});
afterAll(async () => {
  await mq?.disconnect();
  await broker?.stop();
});

const temps = new TempDirs("kitten-cli-");
afterAll(temps.removeAll);

const run = (...args: string[]) => cli([...args, "--config", broker.configPath]);

describe("kitten-mq CLI", () => {
  it("kitten-mq start prints both bound ports and writes <dataDirectory>/admin.json", () => {
    expect(broker.output()).toMatch(/kitten-mq listening on 127\.0\.0\.1:\d+\n/);
    expect(broker.adminUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const state = JSON.parse(readFileSync(join(broker.dir, "data", "admin.json"), "utf8"));
    expect(state).toMatchObject({ pid: broker.process.pid, adminUrl: broker.adminUrl, broker: `127.0.0.1:${broker.port}` });
  });

  it("kitten-mq status prints role, uptime and counters; --json gives the API's JSON", async () => {
    const json = await run("status", "--json");
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ serviceId: "broker-1", role: "master", counters: { received: 3 } });
    const text = await run("status");
    expect(text.code).toBe(0);
    expect(text.stdout).toContain("broker-1  master  up ");
    expect(text.stdout).toMatch(/received +[0-9.]+\/s +\(3 total\)/);
  });

  it("kitten-mq list shows a table of queues; -q one queue; -m its messages", async () => {
    const all = await run("list");
    expect(all.code).toBe(0);
    expect(all.stdout).toMatch(/^QUEUE +READY +IN FLIGHT +DELAYED +WAITING/);
    expect(all.stdout).toMatch(/orders\/v1 +0 +0 +0 +3 +3/);
    const one = await run("list", "-q", "orders/v1", "-m");
    expect(one.code).toBe(0);
    expect(one.stdout).toContain("queue orders/v1: ready 0, in flight 0, delayed 0, waiting 3");
    expect(one.stdout).toContain("messages 1-3 of 3");
    expect(one.stdout).toContain(`{"order":2}`);
    const json = JSON.parse((await run("list", "-q", "orders/v1", "-m", "-i", "1", "--json")).stdout);
    expect(json.ids).toEqual([{ id: "1", ready: 0, inflight: 0, delayed: 0, waiting: 1 }]);
    expect(json.messages.messages.map((m: { destination: string }) => m.destination)).toEqual(["1"]);
  });

  it("kitten-mq peek -q shows messages without taking them; -i counts that id's messages only", async () => {
    for (let i = 0; i < 3; i++) await mq.send(`peek/v1/${i % 2}`, { peek: i });
    const all = await run("peek", "-q", "peek/v1");
    expect(all.code).toBe(0);
    expect(all.stdout).toStartWith("messages 1-3 of 3\nMESSAGE ID");
    expect(all.stdout).toContain(`{"peek":2}`);
    const one = await run("peek", "-q", "peek/v1", "-i", "0");
    expect(one.stdout).toStartWith("messages 1-2 of 2 for id 0\n");
    expect((await run("list", "-q", "peek/v1", "-i", "1", "-m")).stdout).toContain("messages 1-1 of 1 for id 1");
    const json = JSON.parse((await run("peek", "-q", "peek/v1", "--json", "--limit", "1")).stdout);
    expect(json).toMatchObject({ total: 3, limit: 1, offset: 0 });
    expect(json.messages).toHaveLength(1);
    // Peeking took nothing: the three are still there, none delivered.
    expect((await run("peek", "-q", "peek/v1")).stdout).toStartWith("messages 1-3 of 3");
    expect((await run("peek")).code).toBe(2);
  });

  it("kitten-mq publish CHANNEL JSON sends through the admin API; a consumer receives it", async () => {
    const received: unknown[] = [];
    mq.consume("cli-published/v1/*", (_error: unknown, message: unknown, done: () => void) => {
      received.push(message);
      done();
    });
    const sent = await run("publish", "cli-published/v1/7", `{"from": "cli", "n": 1}`);
    expect(sent.code).toBe(0);
    expect(sent.stdout).toMatch(/^kitten-mq: published admin-[0-9a-f-]+ to cli-published\/v1\/7\n$/);
    await waitFor(() => received.length === 1, 5000, "the published message delivered");
    expect(received[0]).toEqual({ from: "cli", n: 1 });
    const json = JSON.parse((await run("publish", "cli-published/v1/8", "2", "--json")).stdout);
    expect(json).toMatchObject({ channel: "cli-published/v1/8", queue: "cli-published/v1" });
    const bad = await run("publish", "nochannel", "1");
    expect(bad.code).toBe(1);
    expect(bad.stderr).toStartWith("kitten-mq: BAD_CHANNEL: ");
    const badJson = JSON.parse((await run("publish", "nochannel", "1", "--json")).stdout);
    expect(badJson.code).toBe("BAD_CHANNEL");
  });

  it("kitten-mq list reports an unknown queue, a bad name and a bad limit with exit code 1", async () => {
    const unknown = await run("list", "-q", "nope/v1");
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain(`NOT_FOUND: Cannot find queue "nope/v1"`);
    expect((await run("list", "-q", "nope")).stderr).toContain(`"endpoint/version"`);
    const limit = await run("list", "-q", "orders/v1", "-m", "--limit", "0");
    expect(limit.code).toBe(1);
    expect(limit.stderr).toContain("BAD_REQUEST");
  });

  it("kitten-mq delete refuses without --yes when stdin is not a terminal, purges with it", async () => {
    await mq.send("purge/v1/a", 1);
    await mq.send("purge/v1/b", 2);
    const refused = await run("delete", "-q", "purge/v1");
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`refusing to purge queue "purge/v1" without --yes: stdin is not a terminal`);
    const one = await run("delete", "-q", "purge/v1", "-i", "a", "--yes");
    expect(one.code).toBe(0);
    expect(one.stdout).toContain(`purged 1 message(s) from queue "purge/v1" id "a"`);
    const all = await run("delete", "-q", "purge/v1", "--yes", "--json");
    expect(JSON.parse(all.stdout)).toEqual({ queue: "purge/v1", id: null, purged: 1 });
    expect((await run("delete")).stderr).toContain("delete needs -q QUEUE");
  });

  it("kitten-mq keys list shows pinned client ids; keys revoke un-pins one", async () => {
    const list = await run("keys", "list");
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(new RegExp(`${CLIENT_ID} +yes`));
    const revoke = await run("keys", "revoke", CLIENT_ID);
    expect(revoke.code).toBe(0);
    expect(revoke.stdout).toContain(`key of "${CLIENT_ID}" un-pinned`);
    const again = await run("keys", "revoke", CLIENT_ID);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("NOT_FOUND");
    expect((await run("keys")).stderr).toContain("usage: kitten-mq keys list");
  });

  it("kitten-mq reload lists every problem of a bad file and changes nothing; a good file applies", async () => {
    broker.writeConfig({ ...baseConfig(broker.dir), maxItemsInQueue: 0, requeueLimit: "x" });
    const bad = await run("reload");
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("CONFIG_INVALID");
    expect(bad.stderr).toContain("  - maxItemsInQueue: must be an integer >= 1: current value is 0");
    expect(bad.stderr).toContain("  - requeueLimit: ");
    const settings = JSON.parse((await run("list", "--json")).stdout).queues[0].settings;
    expect(settings.maxItemsInQueue).toBe(1000);
    broker.writeConfig({ ...baseConfig(broker.dir), maxItemsInQueue: 50 });
    const good = await run("reload");
    expect(good.code).toBe(0);
    expect(good.stdout).toContain(`config reloaded from ${broker.configPath}`);
    expect(JSON.parse((await run("list", "--json")).stdout).queues[0].settings.maxItemsInQueue).toBe(50);
  });

  it("kitten-mq with an unknown command or option prints the usage and exits 2", async () => {
    const unknown = await cli(["frobnicate"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain(`unknown command "frobnicate"`);
    expect((await cli(["status", "--bogus"])).code).toBe(2);
    const help = await cli(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("kitten-mq keys list | keys revoke ID");
  });
});

describe("kitten-mq CLI: stopping and no broker", () => {
  it("kitten-mq soft-stop returns once the broker exited 0; then status says nobody answers", async () => {
    const own = await startBrokerProcess();
    try {
      const stop = await cli(["soft-stop", "--config", own.configPath]);
      expect(stop.code).toBe(0);
      expect(stop.stdout).toContain("soft-stop requested; in-flight deliveries get up to 30 s");
      expect(stop.stdout).toContain("broker stopped");
      expect(await own.exited).toBe(0);
      expect(existsSync(join(own.dir, "data", "admin.json"))).toBe(false);
      const status = await cli(["status", "--config", own.configPath]);
      expect(status.code).toBe(1);
      expect(status.stderr).toContain("no broker answers on http://127.0.0.1:0: is it running?");
    } finally {
      await own.stop();
    }
  });

  it("kitten-mq stop stops with the 5 s bound and the broker exits 0", async () => {
    const own = await startBrokerProcess();
    try {
      const stop = await cli(["stop", "--config", own.configPath, "--json"]);
      expect(stop.code).toBe(0);
      expect(JSON.parse(stop.stdout)).toEqual({ stopping: true, graceMs: 5000, stopped: true });
      expect(await own.exited).toBe(0);
      expect(own.output()).toContain("stop requested on the admin API");
    } finally {
      await own.stop();
    }
  });

  it("kitten-mq status names the URL it tried when no broker runs", async () => {
    const dir = temps.make();
    const configPath = join(dir, "c.json");
    await Bun.write(configPath, JSON.stringify({ httpServerPort: 1, dataDirectory: join(dir, "data") }));
    const status = await cli(["status", "--config", configPath]);
    expect(status.code).toBe(1);
    expect(status.stderr.trim()).toBe("kitten-mq: no broker answers on http://127.0.0.1:1: is it running?");
  });

  it("kitten-mq status explains that the admin API is off when isManagementInterface is false", async () => {
    const dir = temps.make();
    const configPath = join(dir, "c.json");
    await Bun.write(configPath, JSON.stringify({ isManagementInterface: false }));
    const status = await cli(["status", "--config", configPath]);
    expect(status.code).toBe(1);
    expect(status.stderr).toContain("the admin API is off");
    expect(status.stderr).toContain("kill -USR2");
  });

  it("kitten-mq start keeps reloading on SIGUSR2 (systemd's ExecReload)", async () => {
    const own = await startBrokerProcess();
    try {
      own.writeConfig({ ...baseConfig(own.dir), maxItemsInQueue: 9 });
      const reloads = () => own.output().split("reloaded").length - 1;
      // Twice: a handler registered once, or a reload that stops the process, fails the second.
      for (const expected of [1, 2]) {
        own.process.kill("SIGUSR2");
        const deadline = Date.now() + 5000;
        while (reloads() < expected && Date.now() < deadline) await Bun.sleep(20);
        expect(reloads()).toBe(expected);
      }
      expect(own.process.exitCode).toBeNull();
    } finally {
      await own.stop();
    }
  });
});
