/** The CLI's answers to mistakes: one line, the closest match, the missing value named, exit code 2. */
import { afterAll, describe, expect, it } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { TempDirs } from "../helpers/temp_dir.ts";
import { cli } from "./_broker.ts";

const temps = new TempDirs("kitten-cli-usage-");
afterAll(temps.removeAll);

describe("kitten-mq usage", () => {
  it("kitten-mq stauts answers in one line with the closest command, exit code 2", async () => {
    const result = await cli(["stauts"]);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe("");
    expect(result.stderr).toBe(`kitten-mq: unknown command "stauts": did you mean "status"? (see kitten-mq --help)\n`);
  });

  it("kitten-mq status --jsno names the closest flag; list -q names the missing value", async () => {
    const flag = await cli(["status", "--jsno"]);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toBe(`kitten-mq: unknown option "--jsno": did you mean "--json"? (see kitten-mq status --help)\n`);
    const missing = await cli(["list", "-q"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe("kitten-mq: -q (--queue) needs a value: QUEUE (endpoint/version) (see kitten-mq list --help)\n");
    // A flag where the value should be is a forgotten value, not a queue named "-m".
    expect((await cli(["list", "-q", "-m"])).stderr).toContain("-q (--queue) needs a value");
    expect((await cli(["status", "--json=yes"])).stderr).toContain("--json takes no value");
    expect((await cli(["status", "--frobnicate"])).stderr).toBe(`kitten-mq: unknown option "--frobnicate" (see kitten-mq status --help)\n`);
  });

  it("kitten-mq COMMAND --help prints that command's usage and an example, not the global help", async () => {
    for (const command of ["start", "status", "groups", "move", "rebalance", "list", "peek", "publish", "delete", "reload", "soft-stop", "stop", "keys", "init-conf"]) {
      const result = await cli([command, "--help"]);
      expect(result.code).toBe(0);
      expect(result.stdout).toStartWith(`Usage: kitten-mq ${command === "keys" ? "keys list" : command}`);
      expect(result.stdout).toContain("Example:\n  kitten-mq ");
      expect(result.stdout).not.toContain("kitten-mq init-conf [PATH] [--force]       write"); // a line of the global help
    }
    expect((await cli(["help", "peek"])).stdout).toStartWith("Usage: kitten-mq peek -q QUEUE");
    const global = await cli(["--help"]);
    expect(global.code).toBe(0);
    expect(global.stdout).toContain("Exit codes: 0 done; 1 the command failed (broker not running, refused, not found); 2 bad usage.");
  });

  it("kitten-mq --json prints errors as {code, message} on stdout, usage ones with exit code 2", async () => {
    const usage = await cli(["stauts", "--json"]);
    expect(usage.code).toBe(2);
    expect(JSON.parse(usage.stdout)).toEqual({ code: "USAGE", message: `unknown command "stauts": did you mean "status"?` });
    const badFlag = await cli(["list", "--json", "-q"]);
    expect(JSON.parse(badFlag.stdout)).toEqual({ code: "USAGE", message: "-q (--queue) needs a value: QUEUE (endpoint/version)" });
    const dir = temps.make();
    const config = join(dir, "c.json");
    await Bun.write(config, JSON.stringify({ httpServerPort: 1, dataDirectory: join(dir, "data") }));
    const down = await cli(["status", "--json", "-c", config]);
    expect(down.code).toBe(1);
    expect(JSON.parse(down.stdout)).toEqual({ code: "UNREACHABLE", message: "no broker answers on http://127.0.0.1:1: is it running?" });
    const publish = await cli(["publish", "orders/v1/1", "{oops", "--json"]);
    expect(publish.code).toBe(2);
    expect(JSON.parse(publish.stdout).message).toStartWith(`cannot publish to "orders/v1/1": the body is not JSON`);
  });

  it("kitten-mq init-conf --json says what it wrote; its refusal is JSON too", async () => {
    const path = join(temps.make(), "k.json");
    const written = await cli(["init-conf", path, "--json"]);
    expect(written.code).toBe(0);
    expect(JSON.parse(written.stdout)).toMatchObject({ path, written: true });
    expect(existsSync(path)).toBe(true);
    const again = await cli(["init-conf", path, "--json"]);
    expect(again.code).toBe(1);
    expect(JSON.parse(again.stdout)).toEqual({ code: "BAD_REQUEST", message: `"${path}" exists: pass --force to overwrite it` });
  });
});
