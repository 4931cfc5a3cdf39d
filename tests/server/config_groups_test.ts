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
