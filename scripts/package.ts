/**
 * `npm run package`: writes the npm tarballs that a release publishes into `dist/npm/`:
 *
 *   kitten-mq-<version>.tgz                   the client (Node ESM + CommonJS + types) and the
 *                                             `kitten-mq` launcher, no dependencies
 *   kitten-mq-<target>-<version>.tgz          `@kitten-mq/<target>`: the compiled broker for one
 *                                             platform (os/cpu), an optional dependency of the above
 *
 *   bun scripts/package.ts                    main package + this host's platform package
 *   bun scripts/package.ts --binary FILE      the same, with FILE as this host's compiled binary
 *                                             (no compile; `.ci/run` compiles it once)
 *   bun scripts/package.ts --all              every target of scripts/compile.ts (cross-compiled)
 *   bun scripts/package.ts --all --bindir DIR every target, from DIR/kitten-mq-<target> (what
 *                                             `scripts/compile.ts --all` wrote) instead of compiling
 *   bun scripts/package.ts --outdir DIR       writes into DIR instead of dist/npm
 *   bun scripts/package.ts --publish-dry-run  then runs `npm publish --dry-run` on each tarball
 *
 * Installing the tarballs together (`npm install ./dist/npm/*.tgz`) gives what `npm install
 * kitten-mq` gives once they are published. The version is package.json "version"; the script
 * stops when a version stamp disagrees, like scripts/compile.ts.
 */
import { spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { TARGETS, readVersions, versionProblems } from "./compile.ts";
import { buildClient } from "./package/client.ts";
import { mainManifest, platformManifest, platformPackageName, platformReadme, type RootManifest, type Target } from "./package/manifests.ts";

const ROOT = resolve(import.meta.dir, "..");

function fail(message: string): never {
  console.error(`package: ${message}`);
  process.exit(1);
}

function rootManifest(): RootManifest {
  return JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as RootManifest;
}

function writeJson(path: string, value: unknown): void {
  writeFileSync(path, JSON.stringify(value, null, 2) + "\n");
}

/** The main package's folder: client build, launcher, manifest and the user documents. */
export async function stageMainPackage(dir: string, root: RootManifest = rootManifest()): Promise<void> {
  await buildClient(dir);
  mkdirSync(join(dir, "bin"), { recursive: true });
  copyFileSync(join(ROOT, "packaging/npm/kitten-mq.cjs"), join(dir, "bin/kitten-mq.cjs"));
  chmodSync(join(dir, "bin/kitten-mq.cjs"), 0o755);
  for (const file of ["README.md", "LICENSE", "CHANGELOG.md"]) copyFileSync(join(ROOT, file), join(dir, file));
  mkdirSync(join(dir, "docs"), { recursive: true });
  copyFileSync(join(ROOT, "docs/migrating-from-0.12.md"), join(dir, "docs/migrating-from-0.12.md"));
  writeJson(join(dir, "package.json"), mainManifest(root));
}

function stagePlatformPackage(dir: string, target: Target, binary: string, root: RootManifest): void {
  mkdirSync(join(dir, "bin"), { recursive: true });
  copyFileSync(binary, join(dir, "bin/kitten-mq"));
  chmodSync(join(dir, "bin/kitten-mq"), 0o755);
  copyFileSync(join(ROOT, "LICENSE"), join(dir, "LICENSE"));
  writeFileSync(join(dir, "README.md"), platformReadme(target));
  writeJson(join(dir, "package.json"), platformManifest(root, target));
}

interface PackResult {
  filename: string;
  entryCount: number;
  size: number;
}

function npm(args: string[], what: string): string {
  const result = spawnSync("npm", args, { cwd: ROOT, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  if (result.error) fail(`${what}: cannot run npm: ${result.error.message}`);
  if (result.status !== 0) fail(`${what} failed (exit ${result.status}):\n${result.stdout}${result.stderr}`);
  return result.stdout;
}

function pack(dir: string, outDir: string): PackResult {
  const out = npm(["pack", dir, "--pack-destination", outDir, "--json", "--silent"], `npm pack ${relative(ROOT, dir)}`);
  const [result] = JSON.parse(out) as PackResult[];
  if (!result) fail(`npm pack ${dir} printed no result`);
  return result;
}

/** The target of this host's `bun build --compile` (what `scripts/compile.ts` builds without --all). */
export function hostTarget(): Target {
  const target = TARGETS.find((t) => !t.baseline && t.os === process.platform && t.arch === process.arch);
  if (!target) fail(`no release target for ${process.platform}-${process.arch} (targets: ${TARGETS.map((t) => t.name).join(", ")})`);
  return target;
}

function compile(args: string[], outDir: string): void {
  const result = spawnSync(process.execPath, [join(ROOT, "scripts/compile.ts"), ...args, "--outdir", outDir], { cwd: ROOT, stdio: "inherit" });
  if (result.status !== 0) fail(`scripts/compile.ts ${args.join(" ")} failed (exit ${result.status})`);
}

export interface PackageOptions {
  outDir: string;
  /** This host's compiled binary, used instead of compiling one. */
  binary?: string;
  all?: boolean;
  /** With `all`: the folder of `scripts/compile.ts --all`, used instead of compiling again. */
  binDir?: string;
}

/** Builds every tarball into `outDir`; returns their paths (main package first). */
export async function packageAll(options: PackageOptions): Promise<string[]> {
  const stamps = readVersions(ROOT);
  const problems = versionProblems(stamps);
  if (problems.length > 0) fail(`the version stamps disagree:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  const root = rootManifest();
  const outDir = resolve(options.outDir);
  mkdirSync(outDir, { recursive: true });
  for (const name of readdirSync(outDir)) if (name.endsWith(".tgz")) rmSync(join(outDir, name));
  const stage = join(outDir, ".stage");
  rmSync(stage, { recursive: true, force: true });
  mkdirSync(stage, { recursive: true });

  try {
    const binaries: [Target, string][] = [];
    if (options.all) {
      if (options.binary) fail("--binary and --all cannot be combined");
      const binDir = options.binDir ? resolve(options.binDir) : join(stage, "bin");
      if (!options.binDir) compile(["--all"], binDir);
      for (const target of TARGETS) {
        const binary = join(binDir, `kitten-mq-${target.name}`);
        if (!existsSync(binary)) fail(`${binary} is missing: run scripts/compile.ts --all first`);
        binaries.push([target, binary]);
      }
    } else if (options.binDir) {
      fail("--bindir goes with --all (use --binary for this host's binary)");
    } else if (options.binary) {
      const binary = resolve(options.binary);
      if (!existsSync(binary)) fail(`--binary ${options.binary}: no such file`);
      binaries.push([hostTarget(), binary]);
    } else {
      compile([], join(stage, "bin"));
      binaries.push([hostTarget(), join(stage, "bin", "kitten-mq")]);
    }

    const tarballs: string[] = [];
    const report = (name: string, result: PackResult) => {
      const path = join(outDir, result.filename);
      tarballs.push(path);
      console.log(`package: ${relative(ROOT, path) || path} (${name}, ${result.entryCount} files, ${(statSync(path).size / 1e6).toFixed(1)} MB)`);
    };

    const mainDir = join(stage, "kitten-mq");
    await stageMainPackage(mainDir, root);
    report("kitten-mq", pack(mainDir, outDir));
    for (const [target, binary] of binaries) {
      const dir = join(stage, target.name);
      stagePlatformPackage(dir, target, binary, root);
      report(platformPackageName(target), pack(dir, outDir));
    }
    return tarballs;
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

/** npm's dist-tag for a version: a prerelease (1.0.0-beta.1) goes to "beta", never to "latest". */
export function distTag(version: string): string {
  const pre = /^\d+\.\d+\.\d+-([0-9A-Za-z]+)/.exec(version)?.[1];
  return pre ? pre.replace(/\d+$/, "") || "next" : "latest";
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      outdir: { type: "string", default: join(ROOT, "dist/npm") },
      binary: { type: "string" },
      all: { type: "boolean", default: false },
      bindir: { type: "string" },
      "publish-dry-run": { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log("usage: bun scripts/package.ts [--binary FILE | --all [--bindir DIR]] [--outdir DIR] [--publish-dry-run]");
    return;
  }
  const tarballs = await packageAll({ outDir: values.outdir, binary: values.binary, all: values.all, binDir: values.bindir });
  if (values["publish-dry-run"]) {
    const tag = distTag(rootManifest().version);
    for (const tarball of tarballs) {
      // Nothing is uploaded: --dry-run only reports what would be published.
      npm(["publish", "--dry-run", "--access", "public", "--tag", tag, tarball], `npm publish --dry-run ${relative(ROOT, tarball)}`);
      console.log(`package: npm publish --dry-run --tag ${tag} ${relative(ROOT, tarball)}: ok`);
    }
  }
}

if (import.meta.main) await main();
