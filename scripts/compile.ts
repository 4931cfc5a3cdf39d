/**
 * `npm run compile`: builds the self-contained `kitten-mq` executable (Bun runtime + broker + CLI +
 * admin dashboard) with `bun build --compile`.
 *
 *   bun scripts/compile.ts                 dist/kitten-mq for this host
 *   bun scripts/compile.ts --all           dist/kitten-mq-linux-x64, -linux-x64-baseline,
 *                                          -linux-arm64, -darwin-arm64 and dist/SHA256SUMS
 *   bun scripts/compile.ts --tag v1.0.0-beta.1   also checks that the git tag names this version
 *   bun scripts/compile.ts --check         only checks the version stamps (no build)
 *   bun scripts/compile.ts --outdir DIR    writes into DIR instead of dist/
 *
 * The version has one source: package.json "version". deno.json "version", `VERSION` in
 * src/version.ts and `DEFAULT_VERSION` in install.sh must equal it; the script stops before
 * building when one does not (tests/version_test.ts checks the same in `npm test`).
 *
 * Build facts (../shared/TOOLCHAIN.md): `--external cbor-extract` (otherwise the binary hard-codes
 * this folder's path to the native addon; cbor-x falls back to its JS decoder), and the binary is
 * never stripped (that removes the embedded program). The dashboard HTML is imported as text, so
 * the bundler embeds it. Cross targets fetch their Bun runtime through the npm registry.
 */
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";

const ROOT = resolve(import.meta.dir, "..");
const ENTRY = "src/cli/main.ts";

/** Release targets: the asset name suffix (`kitten-mq-<name>`) and Bun's `--target`. */
export const TARGETS = [
  { name: "linux-x64", target: "bun-linux-x64", os: "linux", arch: "x64", baseline: false },
  { name: "linux-x64-baseline", target: "bun-linux-x64-baseline", os: "linux", arch: "x64", baseline: true },
  { name: "linux-arm64", target: "bun-linux-arm64", os: "linux", arch: "arm64", baseline: false },
  { name: "darwin-arm64", target: "bun-darwin-arm64", os: "darwin", arch: "arm64", baseline: false },
] as const;

export interface VersionStamps {
  /** The one source. */
  packageJson: string;
  denoJson: string | null;
  versionTs: string | null;
  installSh: string | null;
}

/** Reads the version from every place that carries it. */
export function readVersions(root = ROOT): VersionStamps {
  const json = (file: string) => JSON.parse(readFileSync(join(root, file), "utf8")) as { version?: unknown };
  const match = (file: string, pattern: RegExp) => pattern.exec(readFileSync(join(root, file), "utf8"))?.[1] ?? null;
  const packageVersion = json("package.json").version;
  const denoVersion = json("deno.json").version;
  return {
    packageJson: typeof packageVersion === "string" ? packageVersion : "",
    denoJson: typeof denoVersion === "string" ? denoVersion : null,
    versionTs: match("src/version.ts", /^export const VERSION = "([^"]*)";$/m),
    installSh: match("install.sh", /^DEFAULT_VERSION="([^"]*)"$/m),
  };
}

/** The problems with the version stamps (empty when they all equal package.json "version"). */
export function versionProblems(stamps: VersionStamps, tag?: string): string[] {
  const problems: string[] = [];
  const version = stamps.packageJson;
  if (!/^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$/.test(version)) {
    problems.push(`package.json "version" is ${JSON.stringify(version)}: expected a semver like 1.2.3`);
  }
  const others: [string, string | null][] = [
    ['deno.json "version"', stamps.denoJson],
    ["VERSION in src/version.ts", stamps.versionTs],
    ['DEFAULT_VERSION="…" in install.sh', stamps.installSh],
  ];
  for (const [where, value] of others) {
    if (value === null) problems.push(`${where} is missing: set it to "${version}"`);
    else if (value !== version) problems.push(`${where} is "${value}" but package.json "version" is "${version}": set it to "${version}"`);
  }
  if (tag !== undefined && tag !== `v${version}`) {
    problems.push(`the tag "${tag}" does not match package.json "version" (expected "v${version}")`);
  }
  return problems;
}

function fail(message: string): never {
  console.error(`compile: ${message}`);
  process.exit(1);
}

async function run(command: string[], what: string): Promise<string> {
  const child = Bun.spawn(command, { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  if (code !== 0) fail(`${what} failed (exit ${code}):\n${stdout}${stderr}`);
  return stdout;
}

async function build(outfile: string, target?: string): Promise<void> {
  const started = performance.now();
  await run(
    [process.execPath, "build", "--compile", "--external", "cbor-extract", ...(target ? [`--target=${target}`] : []), ENTRY, "--outfile", outfile],
    `bun build --compile${target ? ` --target=${target}` : ""}`,
  );
  const mb = (statSync(outfile).size / 1e6).toFixed(1);
  console.log(`compile: ${relative(ROOT, outfile) || outfile} (${target ?? "host"}, ${mb} MB, ${((performance.now() - started) / 1000).toFixed(1)} s)`);
}

/** Runs `--version` on a binary this host can execute: it must name the stamped version. */
async function smoke(outfile: string, version: string): Promise<void> {
  const out = (await run([outfile, "--version"], `${outfile} --version`)).trim();
  if (!out.startsWith(`kitten-mq ${version} `)) fail(`${outfile} --version printed "${out}", expected "kitten-mq ${version} (…)"`);
  console.log(`compile: ${relative(ROOT, outfile) || outfile} --version → ${out}`);
}

function canRun(t: (typeof TARGETS)[number]): boolean {
  if (t.os !== process.platform || t.arch !== process.arch) return false;
  if (t.baseline || t.os !== "linux" || t.arch !== "x64") return true;
  // The default x64 build needs AVX2; only run it where the CPU has it.
  try {
    return /\bavx2\b/.test(readFileSync("/proc/cpuinfo", "utf8"));
  } catch {
    return false;
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      all: { type: "boolean", default: false },
      check: { type: "boolean", default: false },
      tag: { type: "string" },
      outdir: { type: "string", default: "dist" },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log("usage: bun scripts/compile.ts [--all] [--tag vX.Y.Z] [--outdir DIR] [--check]");
    return;
  }

  const stamps = readVersions();
  const problems = versionProblems(stamps, values.tag);
  if (problems.length > 0) {
    fail(`the version stamps disagree (package.json "version" is the one source):\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
  const version = stamps.packageJson;
  console.log(`compile: version ${version} (package.json, deno.json, src/version.ts and install.sh agree)`);
  if (values.check) return;

  const outdir = resolve(ROOT, values.outdir);
  mkdirSync(outdir, { recursive: true });

  if (!values.all) {
    const outfile = join(outdir, "kitten-mq");
    await build(outfile);
    await smoke(outfile, version);
    return;
  }

  const sums: string[] = [];
  rmSync(join(outdir, "SHA256SUMS"), { force: true });
  for (const t of TARGETS) {
    const name = `kitten-mq-${t.name}`;
    const outfile = join(outdir, name);
    await build(outfile, t.target);
    if (canRun(t)) await smoke(outfile, version);
    const hash = createHash("sha256").update(readFileSync(outfile)).digest("hex");
    sums.push(`${hash}  ${name}`);
  }
  // The format of `sha256sum`: `cd dist && sha256sum -c SHA256SUMS` checks them.
  writeFileSync(join(outdir, "SHA256SUMS"), sums.join("\n") + "\n");
  console.log(`compile: ${relative(ROOT, join(outdir, "SHA256SUMS"))}\n${sums.join("\n")}`);
}

if (import.meta.main) await main();
