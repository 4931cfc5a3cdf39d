import { afterEach, describe, expect, it } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { defaultConfig, parseConfig } from "../../src/server/mod.ts";
import { cli } from "./_broker.ts";

let dir: string;
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe("kitten-mq init-conf", () => {
  it("kitten-mq init-conf writes every default, documented in $comment, that the broker loads", async () => {
    dir = mkdtempSync(join(tmpdir(), "kitten-init-"));
    const result = await cli(["init-conf"], { cwd: dir });
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("wrote kitten-mq.config.json");
    const json = JSON.parse(readFileSync(join(dir, "kitten-mq.config.json"), "utf8"));
    expect(Array.isArray(json.$comment)).toBe(true);
    // Every top-level key is documented: a new config key needs its line in init_conf.ts.
    const comment: string = json.$comment.join("\n");
    const undocumented = Object.keys(defaultConfig()).filter((key) => !comment.includes(key));
    expect(undocumented).toEqual([]);
    expect(parseConfig(json)).toEqual(defaultConfig());
  });

  it("kitten-mq init-conf PATH refuses to overwrite an existing file unless --force", async () => {
    dir = mkdtempSync(join(tmpdir(), "kitten-init-"));
    const path = join(dir, "broker.json");
    writeFileSync(path, "{}");
    const refused = await cli(["init-conf", path]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`"${path}" exists: pass --force to overwrite it`);
    expect(readFileSync(path, "utf8")).toBe("{}");
    const forced = await cli(["init-conf", path, "--force"]);
    expect(forced.code).toBe(0);
    expect(parseConfig(JSON.parse(readFileSync(path, "utf8")))).toEqual(defaultConfig());
  });
});
