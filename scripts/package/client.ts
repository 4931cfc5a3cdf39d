/**
 * Builds the client of the npm package from `mod.ts` (the same sources Bun and Deno import):
 *
 *   index.cjs    one CommonJS bundle for Node >= 20, with cbor-x and jose inlined
 *   index.mjs    the ES module entry: re-exports index.cjs, so `import` and `require` in one
 *                application share one copy (one `KittenError` class, `instanceof` works)
 *   index.d.cts, index.d.mts, types/…   declarations emitted by tsc from the sources
 *
 * cbor-x is bundled through its pure JavaScript entry. Its Node entry would try to load the
 * optional native `cbor-extract`, which only speeds up decoding of long strings: the client reads
 * its hot frames by hand, the compiled broker already runs without it (`--external cbor-extract`),
 * and as a dependency it brings an install script and npm's warning about it to every user. With
 * both libraries inlined the package has no dependencies at all; their licenses ship in
 * THIRD_PARTY_LICENSES.md.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { spawnSync } from "node:child_process";

const ROOT = resolve(import.meta.dir, "../..");

/** The libraries inlined into index.cjs, with the license file each ships. */
export const INLINED = [
  { name: "cbor-x", license: "LICENSE" },
  { name: "jose", license: "LICENSE.md" },
] as const;

function fail(message: string): never {
  throw new Error(`package: ${message}`);
}

async function bundle(outDir: string): Promise<void> {
  const pureCborX = join(ROOT, "node_modules/cbor-x/index.js");
  if (!existsSync(pureCborX)) fail(`${relative(ROOT, pureCborX)} is missing: run npm ci`);
  const result = await Bun.build({
    entrypoints: [join(ROOT, "mod.ts")],
    target: "node",
    format: "cjs",
    outdir: outDir,
    naming: "index.cjs",
    plugins: [
      {
        name: "cbor-x without its native extension",
        setup(build) {
          build.onResolve({ filter: /^cbor-x$/ }, () => ({ path: pureCborX }));
        },
      },
    ],
  });
  if (!result.success) fail(`bun build of the client failed:\n${result.logs.join("\n")}`);
  const code = readFileSync(join(outDir, "index.cjs"), "utf8");
  // Only Node built-ins may be left as imports: the package has no dependencies.
  const external = [...code.matchAll(/\brequire\("([^"]+)"\)/g)].map((m) => m[1]!).filter((name) => !name.startsWith("node:"));
  if (external.length > 0) fail(`index.cjs requires ${[...new Set(external)].join(", ")}: only node: built-ins may stay external`);
  if (code.includes("cbor-extract")) fail("index.cjs mentions cbor-extract: the pure JavaScript cbor-x entry was not used");
}

/** index.mjs: named exports of the CommonJS bundle, listed from what it actually exports. */
function esmWrapper(outDir: string): void {
  const names = Object.keys(require(join(outDir, "index.cjs")) as object).sort();
  if (!names.includes("client")) fail(`index.cjs does not export "client" (exports: ${names.join(", ")})`);
  const text = [
    "// The ES module entry re-exports the CommonJS build, so `import` and `require` share one copy.",
    'import kittenMq from "./index.cjs";',
    "",
    `export const { ${names.join(", ")} } = kittenMq;`,
    "export default kittenMq;",
    "",
  ].join("\n");
  writeFileSync(join(outDir, "index.mjs"), text);
}

/** Relative `.ts` specifiers in emitted declarations become `.js`, which every resolution mode reads. */
function rewriteSpecifiers(text: string): string {
  return text.replace(/((?:from|import)\s*\(?\s*)(["'])(\.{1,2}\/[^"']+)\.ts\2/g, "$1$2$3.js$2");
}

/** The declaration files reachable from `entry`, following relative imports. */
function reachable(typesDir: string, entry: string): Set<string> {
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    if (!existsSync(file)) fail(`${relative(typesDir, file)} is imported by the declarations but was not emitted`);
    seen.add(file);
    // Comments hold examples (`import … from "kitten-mq"`), not imports.
    const text = readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
    for (const match of text.matchAll(/(?:from|import)\s*\(?\s*["']([^"']+)["']/g)) {
      const specifier = match[1]!;
      if (specifier.startsWith(".")) visit(resolve(dirname(file), specifier.replace(/\.js$/, ".d.ts")));
      else if (!specifier.startsWith("node:")) {
        // A bare import would need that package installed; the package has no dependencies.
        fail(`${relative(typesDir, file)} imports "${specifier}": the public types may only import node: modules`);
      }
    }
  };
  visit(entry);
  return seen;
}

function declarations(outDir: string): void {
  const typesDir = join(outDir, "types");
  const tsc = join(ROOT, "node_modules/typescript/bin/tsc");
  const result = spawnSync(process.execPath, [tsc, "-p", join(ROOT, "packaging/npm/tsconfig.types.json"), "--outDir", typesDir], {
    encoding: "utf8",
  });
  if (result.status !== 0) fail(`tsc (declarations) failed:\n${result.stdout}${result.stderr}`);
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (path.endsWith(".d.ts")) files.push(path);
    }
  };
  walk(typesDir);
  for (const file of files) writeFileSync(file, rewriteSpecifiers(readFileSync(file, "utf8")));
  // Declarations of internals no public type refers to stay out of the package.
  const keep = reachable(typesDir, join(typesDir, "mod.d.ts"));
  for (const file of files) if (!keep.has(file)) rmSync(file);
  writeFileSync(join(outDir, "index.d.cts"), 'export * from "./types/mod.js";\n');
  // index.mjs also has a default export (the whole module, as `import x from` of CommonJS gives).
  writeFileSync(
    join(outDir, "index.d.mts"),
    'export * from "./types/mod.js";\nimport * as kittenMq from "./types/mod.js";\nexport default kittenMq;\n',
  );
}

function thirdPartyLicenses(outDir: string): void {
  const sections = INLINED.map(({ name, license }) => {
    const dir = join(ROOT, "node_modules", name);
    const version = (JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { version: string }).version;
    return `## ${name} ${version}\n\n${readFileSync(join(dir, license), "utf8").trim()}\n`;
  });
  writeFileSync(
    join(outDir, "THIRD_PARTY_LICENSES.md"),
    `# Third-party licenses\n\nThe client bundle (index.cjs) includes the following libraries.\n\n${sections.join("\n")}`,
  );
}

/** Writes the client files of the main package into `outDir` (created; the client files are replaced). */
export async function buildClient(dir: string): Promise<void> {
  const outDir = resolve(dir);
  mkdirSync(outDir, { recursive: true });
  for (const name of ["index.cjs", "index.mjs", "index.d.cts", "index.d.mts", "types"]) rmSync(join(outDir, name), { recursive: true, force: true });
  await bundle(outDir);
  esmWrapper(outDir);
  declarations(outDir);
  thirdPartyLicenses(outDir);
}
