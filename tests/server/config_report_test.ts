import { afterAll, expect, it } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { loadConfigFile, parseConfig } from "../../src/server/config/config.ts";
import { jsonErrorPosition } from "../../src/server/config/json_position.ts";
import { thrown, thrownAsync } from "../helpers/errors.ts";
import { TempDirs } from "../helpers/temp_dir.ts";

const dirs = new TempDirs("kitten-config-report-");
afterAll(dirs.removeAll);

it("parseConfig() reports every unknown key of the file, in every section", () => {
  const error = thrown(() =>
    parseConfig({
      requeuInterval: 5,
      prefetchh: 2,
      socketServer: { prot: 1, hots: "x" },
      admin: { tls: { cert: "c", key: "k", chain: "x" } },
      rules: [{ client: "a", reed: [] }],
      channels: { "a/v1": { prefetch: 1, tll: 3 } },
    })
  );
  expect(error.code).toBe("CONFIG_INVALID");
  expect((error.details as { path: string }[]).map((problem) => problem.path)).toEqual([
    "requeuInterval",
    "prefetchh",
    "socketServer.prot",
    "socketServer.hots",
    "admin.tls.chain",
    "rules[0].reed",
    `channels["a/v1"].tll`,
  ]);
  expect(error.message).toContain("7 problems");
  expect(error.message).toContain(`prefetchh: unknown key (did you mean "prefetch"?)`);
});

it("parseConfig() reports a bad channel map together with the file's other problems", () => {
  const error = thrown(() => parseConfig({ prefetch: 0, channels: { "a/v1": { map: { x: "nope" } } } }));
  const paths = (error.details as { path: string }[]).map((problem) => problem.path);
  expect(paths).toEqual(["prefetch", `channels["a/v1"].map.x`]);
});

it("loadConfigFile() names the line and column of a JSON syntax error", async () => {
  const path = join(dirs.make(), "kitten-mq.config.json");
  writeFileSync(path, `{\n  "prefetch": 2,\n  "logLevel": ,\n  "durability": "memory"\n}\n`);
  const error = await thrownAsync(() => loadConfigFile(path));
  expect(error.code).toBe("CONFIG_INVALID");
  expect(error.message).toContain(`not valid JSON at line 3, column 15 (found ",")`);
});

it("jsonErrorPosition() finds the first byte that breaks JSON, and nothing in valid JSON", () => {
  expect(jsonErrorPosition(`{"a": [1, 2, {"b": null}], "c": "\\u00e9\\n", "d": -1.5e3}`)).toBeNull();
  expect(jsonErrorPosition(`{"a": 1,}`)).toEqual({ line: 1, column: 9, found: `"}"` });
  expect(jsonErrorPosition(`{\n"a": tru\n}`)).toEqual({ line: 2, column: 9, found: `"\\n"` });
  expect(jsonErrorPosition(`{"a": "line\nbreak"}`)).toEqual({ line: 1, column: 12, found: `"\\n"` });
  expect(jsonErrorPosition(`{"a": 1} trailing`)).toEqual({ line: 1, column: 10, found: `"t"` });
  expect(jsonErrorPosition(`{"a": 01}`)).toEqual({ line: 1, column: 8, found: `"1"` });
  expect(jsonErrorPosition(``)).toEqual({ line: 1, column: 1, found: "end of file" });
  expect(jsonErrorPosition(`{"a": [1, 2`)).toEqual({ line: 1, column: 12, found: "end of file" });
});
