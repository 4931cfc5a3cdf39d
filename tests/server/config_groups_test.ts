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

describe("cluster.group and channels[q].group", () => {
  it("a broker is in the group \"default\" unless told otherwise, advertised at its own address", () => {
    const config = parseConfig({});
    expect(config.cluster.group).toBe("default");
    expect(config.cluster.advertise).toBeNull();
  });

  it("another group is accepted with cluster.etcd, with a channel placed on a named group", () => {
    const config = parseConfig({ cluster: { etcd, group: "g2", advertise: "10.0.0.2:4000" }, channels: { "a/v1": { group: "g1" } } });
    expect(config.cluster.group).toBe("g2");
    expect(config.cluster.advertise).toBe("10.0.0.2:4000");
    expect(config.channels["a/v1"]!.group).toBe("g1");
  });

  it("a group other than default without cluster.etcd is refused, naming the key", () => {
    const found = problemsOf({ cluster: { group: "g2" } }).find((p) => p.path === "cluster.group");
    expect(found?.message).toContain("needs cluster.etcd");
  });

  it("a group name that is not an etcd key segment, and a bad advertise address, are refused", () => {
    const paths = problemsOf({ cluster: { etcd, group: "a/b", advertise: "nohost" }, channels: { "a/v1": { group: "" } } }).map((p) => p.path);
    expect(paths).toContain("cluster.group");
    expect(paths).toContain("cluster.advertise");
    expect(paths.some((p) => p.startsWith("channels") && p.endsWith(".group"))).toBe(true);
  });
});
