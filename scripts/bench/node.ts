/**
 * The benchmark's client processes on Node: `scripts/bench_client.ts` bundled for Node, with the
 * client it imports replaced by the npm package's build (what a Node user installs), so that the
 * Node figures measure the shipped client, not the TypeScript sources through Bun.
 */
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stageMainPackage } from "../package.ts";
import { ROOT, tempDirs } from "./processes.ts";

let built: Promise<string> | null = null;

/** The path of the Node bench client (`node <path> <role> '<json>'`), built once per process. */
export function nodeBenchClient(): Promise<string> {
  built ??= (async () => {
    const dir = await mkdtemp(join(tmpdir(), "kitten-bench-node-"));
    tempDirs.add(dir);
    await stageMainPackage(join(dir, "node_modules/kitten-mq"));
    const result = await Bun.build({
      entrypoints: [join(ROOT, "scripts/bench_client.ts")],
      target: "node",
      format: "esm",
      outdir: dir,
      naming: "bench_client.mjs",
      // Node has no import.meta.main: the bundle is only ever run as the main module.
      define: { "import.meta.main": "true" },
      plugins: [
        {
          name: "the client from the npm package",
          setup(build) {
            build.onResolve({ filter: /(^|\/)client\/mod\.ts$/ }, () => ({ path: "kitten-mq", external: true }));
          },
        },
      ],
    });
    if (!result.success) throw new Error(`bun build of the Node bench client failed:\n${result.logs.join("\n")}`);
    const path = join(dir, "bench_client.mjs");
    await writeFile(join(dir, "package.json"), JSON.stringify({ private: true, type: "module" }));
    return path;
  })();
  return built;
}
