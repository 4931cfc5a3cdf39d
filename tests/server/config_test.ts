import { describe, expect, it } from "bun:test";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KittenError } from "../../src/protocol/errors.ts";
import {
  channelSettings,
  type ConfigProblem,
  defaultConfig,
  loadConfigFile,
  parseConfig,
} from "../../src/server/config/config.ts";
import { thrown } from "../helpers/errors.ts";

/** Runs `fn`, expects a CONFIG_INVALID KittenError and returns it. */
function configError(fn: () => unknown): KittenError {
  const error = thrown(fn);
  expect(error.code).toBe("CONFIG_INVALID");
  return error;
}

async function configErrorAsync(promise: Promise<unknown>): Promise<KittenError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(KittenError);
    expect((error as KittenError).code).toBe("CONFIG_INVALID");
    return error as KittenError;
  }
  throw new Error("expected a CONFIG_INVALID error, got none");
}

function problems(input: unknown): ConfigProblem[] {
  return configError(() => parseConfig(input)).details as ConfigProblem[];
}

/** The problem reported at `path`, failing the test when there is none. */
function problemAt(input: unknown, path: string): ConfigProblem {
  const found = problems(input).find((problem) => problem.path === path);
  if (!found) throw new Error(`no problem at ${path}: ${JSON.stringify(problems(input))}`);
  return found;
}

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "kitten-config-"));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe("parseConfig()", () => {
  it("parseConfig() returns every default when the input is {}", () => {
    const config = parseConfig({});
    expect(config).toEqual(defaultConfig());
    expect(config.socketServer).toEqual({
      port: 1234,
      host: "127.0.0.1",
      token: null,
      maxFrameSize: 1048576,
      maxConnections: 10000,
      handshakeTimeoutMs: 5000,
      maxUnauthenticatedBytes: 8388608,
      maxOutgoingBytes: 4194304,
      slowConsumerGraceMs: 10000,
      tls: null,
      logs: "packets",
      packetsFilename: "broker.log",
    });
    expect(config.isMaster).toBe(true);
    expect(config.serviceId).toBe("broker-1");
    expect(config.prefetch).toBe(1);
    expect(config.listenerPrefetch).toBe(1000);
    expect(config.maxMessagesPerQueue).toBeNull(); // by durability: see channelSettings()
    expect(config.maxItemsInQueue).toBeNull();
    expect(config.memoryBudgetBytes).toBe(8388608);
    expect(config.minFreeDiskBytes).toBe(268435456);
    expect(config.dataDirectory).toBe("kitten-mq-data");
    expect(config.rules).toEqual([]);
    expect(config.channels).toEqual({});
  });

  it("parseConfig() keeps socketServer.host when only the port is given (deep merge)", () => {
    const config = parseConfig({ socketServer: { port: 4000 } });
    expect(config.socketServer.port).toBe(4000);
    expect(config.socketServer.host).toBe("127.0.0.1");
    expect(config.socketServer.maxFrameSize).toBe(1048576);
  });

  it("parseConfig() keeps the given values over the defaults", () => {
    const input = {
      serviceId: "broker.eu-2",
      isMaster: false,
      socketServer: { host: "0.0.0.0", token: "s3cret", logs: "/var/packets", packetsFilename: "x.log" },
      requeueInterval: 0.5,
      logLevel: 4,
      isManagementInterface: false,
      rules: [{ client: "easilys-*", read: ["!invoice/v1/*", "invoice/*"], write: ["invoice/v1/42"] }],
      channels: { "invoice/1.0": { prefetch: 5, ttl: 30, map: { id: ["int"] }, deadLetter: "dead/v1" } },
    };
    const config = parseConfig(input);
    expect(config.serviceId).toBe("broker.eu-2");
    expect(config.isMaster).toBe(false);
    expect(config.socketServer).toMatchObject({ host: "0.0.0.0", port: 1234, token: "s3cret" });
    expect(config.requeueInterval).toBe(0.5);
    expect(config.logLevel).toBe(4);
    expect(config.rules).toEqual(input.rules);
    expect(config.channels).toEqual(input.channels);
  });

  it("parseConfig() does not alias the defaults or the input", () => {
    const input = { socketServer: { port: 5 } };
    const config = parseConfig(input);
    config.socketServer.host = "changed";
    expect(input.socketServer).toEqual({ port: 5 });
    expect(defaultConfig().socketServer.host).toBe("127.0.0.1");
  });

  it("parseConfig() accepts isStopping for compatibility and drops it", () => {
    const config = parseConfig({ isStopping: true });
    expect("isStopping" in config).toBe(false);
  });

  it("parseConfig() reports every problem with its key path", () => {
    const cases: Array<[unknown, string, string]> = [
      [{ serviceId: "has space" }, "serviceId", "letters, digits"],
      [{ serviceId: "x".repeat(129) }, "serviceId", "1 to 128"],
      [{ isMaster: "yes" }, "isMaster", "must be true or false"],
      [{ socketServer: { port: 70000 } }, "socketServer.port", "from 0 to 65535: current value is 70000"],
      [{ socketServer: { port: 1.5 } }, "socketServer.port", "must be an integer"],
      [{ socketServer: { host: "" } }, "socketServer.host", "non-empty string"],
      [{ socketServer: { token: 42 } }, "socketServer.token", "string or null"],
      [{ socketServer: { token: "" } }, "socketServer.token", "non-empty string or null"],
      [{ socketServer: { maxFrameSize: 100 } }, "socketServer.maxFrameSize", "from 1024 to 67108864"],
      [{ socketServer: "localhost" }, "socketServer", "must be an object"],
      [{ maxItemsInQueue: 0 }, "maxItemsInQueue", "must be an integer >= 1: current value is 0"],
      [{ requeueLimit: "5" }, "requeueLimit", `current value is "5"`],
      [{ requeueInterval: 0 }, "requeueInterval", "seconds > 0"],
      [{ prefetch: 65536 }, "prefetch", "from 1 to 65535"],
      [{ listenerPrefetch: 0 }, "listenerPrefetch", "from 1 to 65535"],
      [{ maxMessagesPerQueue: -1 }, "maxMessagesPerQueue", ">= 1"],
      [{ logLevel: 5 }, "logLevel", "from 1 to 4"],
      [{ registeredClientsPath: 3 }, "registeredClientsPath", "must be a string"],
      [{ dataDirectory: null }, "dataDirectory", "must be a string"],
      [{ isManagementInterface: 1 }, "isManagementInterface", "true or false"],
      [{ httpServerPort: -1 }, "httpServerPort", "from 0 to 65535"],
      [{ pollIntervalHTTP: 99 }, "pollIntervalHTTP", ">= 100"],
      [{ rules: {} }, "rules", "must be an array"],
      [{ rules: [{ client: "" }] }, "rules[0].client", "non-empty string"],
      [{ rules: [{ read: [] }] }, "rules[0].client", "is required"],
      [{ rules: [{ client: "a", read: "invoice/*" }] }, "rules[0].read", "must be an array"],
      [{ channels: [] }, "channels", "must be an object"],
      [{ channels: { "a/v1": { prefetch: 0 } } }, `channels["a/v1"].prefetch`, "from 1 to 65535"],
      [{ channels: { "a/v1": { ttl: -5 } } }, `channels["a/v1"].ttl`, "seconds > 0"],
      [{ channels: { "a/v1": { requeueInterval: "1" } } }, `channels["a/v1"].requeueInterval`, "seconds > 0"],
      [{ channels: { "a/v1": { deadLetter: "dead" } } }, `channels["a/v1"].deadLetter`, `"endpoint/version"`],
      [{ channels: { "a/v1": 3 } }, `channels["a/v1"]`, "must be an object"],
    ];
    for (const [input, path, text] of cases) {
      const { message } = problemAt(input, path);
      expect({ path, message }).toEqual({ path, message: expect.stringContaining(text) });
    }
  });

  it("parseConfig() reports several problems together, counted, in one error", () => {
    const error = configError(() =>
      parseConfig(
        { socketServer: { port: -1 }, maxItemsInQueue: 0, rules: [{}, { client: "a", read: ["x"] }] },
        "kitten.json",
      )
    );
    const details = error.details as ConfigProblem[];
    expect(details.map((problem) => problem.path)).toEqual([
      "socketServer.port",
      "maxItemsInQueue",
      "rules[0].client",
      "rules[1].read[0]",
    ]);
    expect(error.message).toStartWith(`Cannot load config "kitten.json": 4 problems: socketServer.port: must be`);
    for (const problem of details) expect(error.message).toContain(`${problem.path}: ${problem.message}`);
    expect(error.message.split("; ")).toHaveLength(4);
  });

  it("parseConfig() names the source and says 1 problem for a single one", () => {
    const error = configError(() => parseConfig({ logLevel: 0 }));
    expect(error.message).toBe(
      `Cannot load config "config": 1 problem: logLevel: must be an integer from 1 to 4: current value is 0`,
    );
  });

  it("parseConfig() reports values that are not JSON without throwing anything else", () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(problemAt({ socketServer: { port: 1n } }, "socketServer.port").message).toContain("current value is 1");
    expect(problemAt({ channels: { "a/v1": { prefetch: cyclic } } }, `channels["a/v1"].prefetch`).message).toContain(
      "current value is [object Object]",
    );
  });

  it("parseConfig() refuses input that is not an object", () => {
    for (const input of [null, undefined, 42, "config", [], [{}]]) {
      const error = configError(() => parseConfig(input, "x.json"));
      expect(error.details).toEqual([{ path: "(root)", message: expect.stringContaining("must be an object") }]);
      expect(error.message).toStartWith(`Cannot load config "x.json": 1 problem: (root): must be an object`);
    }
  });

  it("parseConfig() reports unknown keys at every level, with a hint for typos", () => {
    const found = problems({
      prefetchh: 2,
      socketServer: { hots: "0.0.0.0" },
      rules: [{ client: "a", reed: [] }],
      channels: { "a/v1": { foo: 1 } },
    });
    expect(found).toContainEqual({ path: "prefetchh", message: `unknown key (did you mean "prefetch"?)` });
    expect(found).toContainEqual({ path: "socketServer.hots", message: `unknown key (did you mean "host"?)` });
    expect(found).toContainEqual({ path: "rules[0].reed", message: `unknown key (did you mean "read"?)` });
    expect(found).toContainEqual({ path: `channels["a/v1"].foo`, message: "unknown key" });
    expect(found).toHaveLength(4);
  });

  it("parseConfig() treats a JSON __proto__ key as an unknown key, not a prototype", () => {
    const found = problems(JSON.parse(`{"__proto__": {"isMaster": "no"}}`));
    expect(found).toEqual([{ path: "__proto__", message: "unknown key" }]);
  });

  it("parseConfig() validates rule patterns", () => {
    const valid = ["invoice/*", "invoice/v1/*", "invoice/v1/42", "!invoice/v1/*", "!invoice/*", "in_vo-ice/1.0/a%2Fb"];
    expect(parseConfig({ rules: [{ client: "a", read: valid, write: valid }] }).rules[0]!.read).toEqual(valid);

    const invalid = ["invoice", "invoice/v1", "invoice/*/1", "invoice/v1/1/2", "inv oice/*", "invoice/v1/a*b", "", "!"];
    const found = problems({ rules: [{ client: "a", read: ["ok/*", ...invalid] }] });
    expect(found.map((problem) => problem.path)).toEqual(invalid.map((_, i) => `rules[0].read[${i + 1}]`));
    expect(found[0]!.message).toBe(
      `must match "endpoint/*", "endpoint/version/*" or "endpoint/version/id", optionally prefixed with "!": ` +
        `current value is "invoice"`,
    );
  });

  it("parseConfig() refuses * as a rule endpoint with a clear message", () => {
    const found = problems({ rules: [{ client: "a" }, { client: "b", write: ["*/*", "!*/v1/x"] }] });
    expect(found.map((problem) => problem.path)).toEqual(["rules[1].write[0]", "rules[1].write[1]"]);
    for (const problem of found) expect(problem.message).toContain(`endpoint cannot be "*"`);
  });

  it("parseConfig() validates channel keys as endpoint/version", () => {
    const ok = parseConfig({ channels: { "invoice/v1": {}, "in_v-1/1.0": { ttl: 1 } } });
    expect(Object.keys(ok.channels)).toEqual(["invoice/v1", "in_v-1/1.0"]);

    const found = problems({ channels: { "bad key": {}, invoice: {}, "invoice/v1/1": {}, "*/v1": {}, "a/v1": {} } });
    expect(found.map((problem) => problem.path)).toEqual([
      `channels["bad key"]`,
      `channels["invoice"]`,
      `channels["invoice/v1/1"]`,
      `channels["*/v1"]`,
    ]);
    expect(found[0]!.message).toContain(`must be "endpoint/version"`);
    expect(found[0]!.message).toContain(`current value is "bad key"`);
  });

  it("parseConfig() refuses equal client and admin ports, naming both keys", () => {
    const found = problems({ socketServer: { port: 8080 } });
    expect(found).toEqual([{ path: "socketServer.port", message: expect.stringContaining("httpServerPort") }]);
    expect(found[0]!.message).toContain("8080");
    // No clash when the admin interface is off, or when 0 asks for any free port.
    expect(parseConfig({ socketServer: { port: 8080 }, isManagementInterface: false }).socketServer.port).toBe(8080);
    expect(parseConfig({ socketServer: { port: 0 }, httpServerPort: 0 }).httpServerPort).toBe(0);
    // Equal but out of range: the range problems say it all, the clash is not reported on top.
    expect(problems({ socketServer: { port: 70000 }, httpServerPort: 70000 }).map((p) => p.path)).toEqual([
      "socketServer.port",
      "httpServerPort",
    ]);
  });

  it("parseConfig() refuses a channel that dead-letters into itself", () => {
    const found = problems({ channels: { "a/v1": { deadLetter: "a/v1" } } });
    expect(found).toEqual([{ path: `channels["a/v1"].deadLetter`, message: expect.stringContaining("must differ") }]);
  });
});

describe("channelSettings()", () => {
  it("channelSettings() uses the broker-level values for a queue with no channels entry", () => {
    const config = parseConfig({ prefetch: 3, requeueInterval: 2.5, channels: { "other/v1": { prefetch: 9 } } });
    expect(channelSettings(config, "invoice/v1")).toEqual({
      prefetch: 3,
      listenerPrefetch: 1000,
      ttl: null,
      maxItemsInQueue: Infinity, // durable: its messages wait on disk
      maxMessagesPerQueue: Infinity,
      memoryBudgetBytes: 8388608,
      requeueLimit: 5,
      requeueInterval: 2.5,
      deadLetter: null,
      durability: "fsync",
    });
  });

  it("channelSettings() bounds a memory queue by count when the config sets no bound, and a durable one by disk only", () => {
    const config = parseConfig({ durability: "memory", channels: { "orders/v1": { durability: "fsync", memoryBudgetBytes: 4096 } } });
    const memory = channelSettings(config, "invoice/v1");
    expect([memory.maxItemsInQueue, memory.maxMessagesPerQueue]).toEqual([1000, 1_000_000]);
    const durable = channelSettings(config, "orders/v1");
    expect([durable.maxItemsInQueue, durable.maxMessagesPerQueue, durable.memoryBudgetBytes]).toEqual([Infinity, Infinity, 4096]);
    const explicit = channelSettings(parseConfig({ maxItemsInQueue: 7, maxMessagesPerQueue: 9 }), "orders/v1");
    expect([explicit.maxItemsInQueue, explicit.maxMessagesPerQueue]).toEqual([7, 9]);
  });

  it("channelSettings() lets a channels entry override each broker-level key", () => {
    const config = parseConfig({
      prefetch: 3,
      maxItemsInQueue: 50,
      channels: {
        "invoice/v1": {
          prefetch: 7,
          listenerPrefetch: 20,
          ttl: 60,
          maxItemsInQueue: 10,
          requeueLimit: 2,
          requeueInterval: 0.25,
          deadLetter: "invoice-dead/v1",
        },
        "invoice/v2": { ttl: 5 },
      },
    });
    expect(channelSettings(config, "invoice/v1")).toEqual({
      prefetch: 7,
      listenerPrefetch: 20,
      ttl: 60,
      maxItemsInQueue: 10,
      maxMessagesPerQueue: Infinity,
      memoryBudgetBytes: 8388608,
      requeueLimit: 2,
      requeueInterval: 0.25,
      deadLetter: "invoice-dead/v1",
      durability: "fsync",
    });
    expect(channelSettings(config, "invoice/v2")).toEqual({
      prefetch: 3,
      listenerPrefetch: 1000,
      ttl: 5,
      maxItemsInQueue: 50,
      maxMessagesPerQueue: Infinity,
      memoryBudgetBytes: 8388608,
      requeueLimit: 5,
      requeueInterval: 100,
      deadLetter: null,
      durability: "fsync",
    });
  });

  it("channelSettings() ignores inherited object keys as queue names", () => {
    expect(channelSettings(parseConfig({}), "constructor").prefetch).toBe(1);
  });
});

describe("loadConfigFile()", () => {
  it("loadConfigFile() reports a missing file with its path", async () => {
    await withTempDir(async (dir) => {
      const path = join(dir, "missing.json");
      const error = await configErrorAsync(loadConfigFile(path));
      expect(error.message).toBe(`Cannot load config "${path}": 1 problem: (file): file not found`);
      expect(error.details).toEqual([{ path: "(file)", message: "file not found" }]);
    });
  });

  it("loadConfigFile() reports a file that is not JSON with the JSON error", async () => {
    await withTempDir(async (dir) => {
      const path = join(dir, "bad.json");
      await writeFile(path, `{"serviceId": "a",}`);
      const error = await configErrorAsync(loadConfigFile(path));
      expect(error.message).toStartWith(`Cannot load config "${path}": 1 problem: (file): not valid JSON at line 1, column 19 (found "}"): `);
      expect(error.cause).toBeInstanceOf(SyntaxError);
      expect(error.message).toContain((error.cause as SyntaxError).message);
    });
  });

  it("loadConfigFile() names the file in validation problems", async () => {
    await withTempDir(async (dir) => {
      const path = join(dir, "kitten.json");
      await writeFile(path, JSON.stringify({ maxItemsInQueue: 0 }));
      const error = await configErrorAsync(loadConfigFile(path));
      expect(error.message).toStartWith(`Cannot load config "${path}": 1 problem: maxItemsInQueue: `);
    });
  });

  it("loadConfigFile() resolves relative directories against the config file's folder", async () => {
    await withTempDir(async (dir) => {
      await mkdir(join(dir, "etc"));
      const path = join(dir, "etc", "kitten.json");
      await writeFile(
        path,
        JSON.stringify({
          registeredClientsPath: "pinned",
          logsDirectory: "../logs",
          keysDirectory: "/abs/keys",
          socketServer: { port: 4100 },
        }),
      );
      const config = await loadConfigFile(path);
      expect(config.registeredClientsPath).toBe(join(dir, "etc", "pinned"));
      expect(config.logsDirectory).toBe(join(dir, "logs"));
      expect(config.keysDirectory).toBe("/abs/keys");
      expect(config.dataDirectory).toBe(join(dir, "etc", "kitten-mq-data"));
      expect(config.socketServer).toMatchObject({ port: 4100, host: "127.0.0.1" });
      expect(config.keysName).toBe("broker");
    });
  });
});
