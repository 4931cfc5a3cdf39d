import { describe, expect, it } from "bun:test";
import { KittenError } from "../../src/protocol/errors.ts";
import { type ConfigProblem, parseConfig } from "../../src/server/config/config.ts";

const etcd = { endpoints: ["http://127.0.0.1:2379"] };

function problemsOf(input: unknown): ConfigProblem[] {
  try {
    parseConfig(input);
  } catch (error) {
    expect((error as KittenError).code).toBe("CONFIG_INVALID");
    return (error as KittenError).details as ConfigProblem[];
  }
  throw new Error("expected CONFIG_INVALID");
}

describe("cluster.group", () => {
  it("a broker is in the group \"default\" unless told otherwise", () => {
    expect(parseConfig({}).cluster.group).toBe("default");
  });

  it("another group is accepted with cluster.etcd", () => {
    expect(parseConfig({ cluster: { etcd, group: "g2" } }).cluster.group).toBe("g2");
  });

  it("a group other than default without cluster.etcd is refused, naming the key", () => {
    const found = problemsOf({ cluster: { group: "g2" } }).find((p) => p.path === "cluster.group");
    expect(found?.message).toContain("needs cluster.etcd");
  });

  it("a group name that is not an etcd key segment is refused", () => {
    const found = problemsOf({ cluster: { etcd, group: "a/b" } }).find((p) => p.path === "cluster.group");
    expect(found?.message).toContain("letters, digits");
  });
});

describe("cluster.group on reload", () => {
  it("a reload that changes the group is refused, naming the key: the election was joined at start", async () => {
    const { restartKeyProblems } = await import("../../src/server/config/restart_keys.ts");
    const running = parseConfig({ cluster: { etcd, group: "g1" } });
    const found = restartKeyProblems(running, parseConfig({ cluster: { etcd, group: "g2" } }));
    expect(found.map((p) => p.path)).toEqual(["cluster.group"]);
    expect(restartKeyProblems(running, parseConfig({ cluster: { etcd, group: "g1" } }))).toEqual([]);
  });
});

describe("channels[q].group and cluster.advertise", () => {
  it("a channel's group is accepted with cluster.etcd and refused without, naming the channel", () => {
    expect(parseConfig({ cluster: { etcd }, channels: { "orders/v1": { group: "g2" } } }).channels["orders/v1"]!.group).toBe("g2");
    const found = problemsOf({ channels: { "orders/v1": { group: "g2" } } }).find((p) => p.path === `channels["orders/v1"].group`);
    expect(found?.message).toContain("needs cluster.etcd");
  });

  it("advertise is host:port or null; anything else is refused", () => {
    expect(parseConfig({}).cluster.advertise).toBe(null);
    expect(parseConfig({ cluster: { advertise: "mq-1.internal:4000" } }).cluster.advertise).toBe("mq-1.internal:4000");
    expect(parseConfig({ cluster: { advertise: "[::1]:4000" } }).cluster.advertise).toBe("[::1]:4000");
    for (const bad of ["mq-1", "mq-1:4000@id", "http://mq:4000"]) {
      expect(problemsOf({ cluster: { advertise: bad } }).some((p) => p.path === "cluster.advertise")).toBe(true);
    }
  });

  it("the map names a broker by advertise, else by its host (this machine's name on 0.0.0.0) and bound port", async () => {
    const { advertisedAddress } = await import("../../src/server/placement.ts");
    const { hostname } = await import("node:os");
    expect(advertisedAddress(parseConfig({ serviceId: "b1", cluster: { advertise: "mq:9" } }), 4000)).toBe("mq:9@b1");
    expect(advertisedAddress(parseConfig({ serviceId: "b1", socketServer: { host: "127.0.0.1" } }), 4000)).toBe("127.0.0.1:4000@b1");
    expect(advertisedAddress(parseConfig({ serviceId: "b1", socketServer: { host: "0.0.0.0" } }), 4000)).toBe(`${hostname()}:4000@b1`);
    expect(advertisedAddress(parseConfig({ serviceId: "b1", socketServer: { host: "::1" } }), 4000)).toBe("[::1]:4000@b1");
  });
});

describe("cluster.moveBytesPerSecond", () => {
  it("defaults to 10 MiB/s; below 64 KiB/s, or not an integer, it is refused, naming the key", () => {
    expect(parseConfig({}).cluster.moveBytesPerSecond).toBe(10 * 1024 * 1024);
    expect(parseConfig({ cluster: { moveBytesPerSecond: 1048576 } }).cluster.moveBytesPerSecond).toBe(1048576);
    for (const bad of [1000, 1.5e6 + 0.5, "fast"]) {
      expect(problemsOf({ cluster: { moveBytesPerSecond: bad } }).some((p) => p.path === "cluster.moveBytesPerSecond")).toBe(true);
    }
  });
});
