/**
 * The npm packages as a Node user gets them: `scripts/package.ts` builds the tarballs once (with
 * the binary under test), they are installed with plain `npm install <the .tgz files>` into a
 * project folder and with `npm install -g` into a prefix, and everything then runs with a PATH
 * that has Node and npm but no Bun and no Deno: `kitten-mq` (and `npx kitten-mq`) through the
 * launcher, a broker started by that install's `kitten-mq start`, the original README's client
 * snippet with `require`, the promise API with `import`, and tsc on files using the types. A
 * Deno program in that folder (item of the README's Deno steps) is checked and run too.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PROTOCOL_VERSION, STORE_VERSION, VERSION } from "../../src/version.ts";
import { distTag, hostTarget } from "../../scripts/package.ts";
import { type BinaryBroker, cleanupAll, ROOT, run, shipBinary, startBinaryBroker, tempDir } from "./helpers.ts";

const FIXTURES = join(import.meta.dir, "npm_fixtures");
/** Packing a 110 MB binary and installing it twice takes a while on a busy 2-core machine. */
const SLOW = 120_000;

let tarballs: string[] = [];
let project = "";
let globalPrefix = "";
/** The environment of every command below: Node and npm on PATH, and nothing else of ours. */
let userEnv: Record<string, string> = {};
const platformPackage = `@kitten-mq/${hostTarget().name}`;

/** A folder holding links to node, npm, npx and sh only: the PATH of a machine without Bun or Deno. */
function nodeOnlyPath(): string {
  const dir = tempDir("kitten-npm-path-");
  for (const name of ["node", "npm", "npx", "sh"]) {
    const found = Bun.which(name, { PATH: "/usr/local/bin:/usr/bin:/bin" });
    if (!found) throw new Error(`${name} is not installed in /usr/local/bin, /usr/bin or /bin`);
    symlinkSync(found, join(dir, name));
  }
  return dir;
}

function npmInstall(args: string[], cwd: string) {
  return run(["npm", "install", "--offline", "--no-audit", "--no-fund", ...args, ...tarballs], { cwd, env: userEnv });
}

beforeAll(async () => {
  const binary = await shipBinary();
  const outDir = tempDir("kitten-npm-tarballs-");
  const packaged = await run([process.execPath, join(ROOT, "scripts/package.ts"), "--binary", binary, "--outdir", outDir], { cwd: ROOT });
  if (packaged.code !== 0) throw new Error(`scripts/package.ts failed (exit ${packaged.code}):\n${packaged.stdout}${packaged.stderr}`);
  tarballs = readdirSync(outDir).filter((name) => name.endsWith(".tgz")).map((name) => join(outDir, name));

  const path = nodeOnlyPath();
  const home = tempDir("kitten-npm-home-");
  // Only what a user's shell would have; npm's cache in a fresh home, no update check.
  userEnv = { PATH: path, HOME: home, npm_config_update_notifier: "false", NO_COLOR: "1" };
  project = tempDir("kitten-npm-project-");
  // What `npm init -y` leaves: npm then installs here, not into a parent folder that has a package.json.
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "user-project", private: true }));
  globalPrefix = tempDir("kitten-npm-global-");
}, SLOW);

afterAll(cleanupAll);

const tarballNamed = (prefix: string) => tarballs.find((t) => t.endsWith(`/${prefix}-${VERSION}.tgz`))!;

async function tarballFiles(tarball: string): Promise<Map<string, string>> {
  const listing = await run(["tar", "tzvf", tarball]);
  expect(listing.code).toBe(0);
  // "-rw-r--r-- 0/0  1234 1985-10-26 08:15 package/index.cjs" → path → mode
  return new Map(listing.stdout.trim().split("\n").map((line) => [line.split(/\s+/).at(-1)!.replace(/^package\//, ""), line.split(/\s+/)[0]!]));
}

describe("ship: npm packages", () => {
  test("npm run package writes the main package and this host's platform package", async () => {
    expect(tarballs.map((t) => t.split("/").at(-1)).sort()).toEqual(
      [`kitten-mq-${VERSION}.tgz`, `kitten-mq-${hostTarget().name}-${VERSION}.tgz`].sort(),
    );
    const main = await tarballFiles(tarballNamed("kitten-mq"));
    const files = [...main.keys()].sort();
    for (const needed of ["package.json", "README.md", "LICENSE", "CHANGELOG.md", "THIRD_PARTY_LICENSES.md", "index.cjs", "index.mjs", "index.d.cts", "index.d.mts", "types/mod.d.ts", "bin/kitten-mq.cjs", "docs/migrating-from-0.12.md"]) {
      expect(files).toContain(needed);
    }
    // Only what users need: no sources, tests, scripts or CI.
    expect(files.filter((f) => !/^(package\.json|README\.md|LICENSE|CHANGELOG\.md|THIRD_PARTY_LICENSES\.md|index\.(cjs|mjs|d\.cts|d\.mts)|types\/.*\.d\.ts|bin\/kitten-mq\.cjs|docs\/migrating-from-0\.12\.md)$/.test(f))).toEqual([]);
    expect(main.get("bin/kitten-mq.cjs")).toBe("-rwxr-xr-x");

    const platform = await tarballFiles(tarballNamed(`kitten-mq-${hostTarget().name}`));
    expect([...platform.keys()].sort()).toEqual(["LICENSE", "README.md", "bin/kitten-mq", "package.json"]);
    expect(platform.get("bin/kitten-mq")).toBe("-rwxr-xr-x");
  });

  test("npm publish --dry-run accepts each tarball, a prerelease under its own dist-tag", async () => {
    expect([distTag("1.0.0-beta.1"), distTag("2.0.0-rc.3"), distTag("1.0.0")]).toEqual(["beta", "rc", "latest"]);
    for (const tarball of tarballs) {
      const result = await run(["npm", "publish", "--dry-run", "--offline", "--access", "public", "--tag", distTag(VERSION), tarball], { cwd: project, env: userEnv });
      expect(result.code).toBe(0);
      const output = result.stdout + result.stderr;
      expect(output).toContain(`with tag ${distTag(VERSION)} and public access (dry-run)`);
      // Nothing in the manifests for npm to correct; the only warning is that nobody is logged in.
      expect(output.split("\n").filter((line) => /warn/i.test(line) && !/requires you to be logged in/.test(line))).toEqual([]);
    }
  }, SLOW);

  test("installs with plain npm install into an empty project, without a warning", async () => {
    const result = await npmInstall([], project);
    expect(result.code).toBe(0);
    expect(`${result.stdout}${result.stderr}`).not.toMatch(/warn/i);
    expect(`${result.stdout}`).toContain("added 2 packages");

    const manifest = JSON.parse(readFileSync(join(project, "node_modules/kitten-mq/package.json"), "utf8"));
    expect(manifest).toMatchObject({ name: "kitten-mq", version: VERSION, license: "MIT", engines: { node: ">=20" }, types: "./index.d.cts" });
    expect(manifest.dependencies).toBeUndefined(); // nothing that could bring an install script
    expect(manifest.scripts).toBeUndefined();
    // npm picks one by os/cpu; the baseline x64 build is installed by hand (see the launcher).
    expect(manifest.optionalDependencies).toEqual({
      "@kitten-mq/darwin-arm64": VERSION,
      "@kitten-mq/linux-arm64": VERSION,
      "@kitten-mq/linux-x64": VERSION,
    });
    expect(manifest.exports["."].require.default).toBe("./index.cjs");
    expect(manifest.exports["."].import.default).toBe("./index.mjs");
    const platform = JSON.parse(readFileSync(join(project, "node_modules", platformPackage, "package.json"), "utf8"));
    expect(platform).toMatchObject({ os: [process.platform], cpu: [process.arch], version: VERSION });
    expect(statSync(join(project, "node_modules", platformPackage, "bin/kitten-mq")).mode & 0o111).toBe(0o111);
  }, SLOW);

  test("the project's kitten-mq and npx kitten-mq run the binary with no Bun or Deno on PATH", async () => {
    for (const absent of ["bun", "deno"]) expect(Bun.which(absent, { PATH: userEnv.PATH })).toBeNull();
    const expected = `kitten-mq ${VERSION} (protocol ${PROTOCOL_VERSION}, store ${STORE_VERSION})`;
    const direct = await run([join(project, "node_modules/.bin/kitten-mq"), "--version"], { cwd: project, env: userEnv });
    expect(direct.stderr).toBe("");
    expect(direct.stdout.trim()).toBe(expected);
    const npx = await run(["npx", "--offline", "kitten-mq", "--version"], { cwd: project, env: userEnv });
    expect(npx.stdout.trim()).toBe(expected);
    expect(npx.code).toBe(0);
    // Exit codes pass through: an unknown command exits 2, as the binary does.
    const unknown = await run([join(project, "node_modules/.bin/kitten-mq"), "frobnicate"], { cwd: project, env: userEnv });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown command "frobnicate"');
  }, SLOW);

  test("npm install -g gives a kitten-mq command", async () => {
    const result = await npmInstall(["-g", "--prefix", globalPrefix], project);
    expect(result.code).toBe(0);
    expect(`${result.stdout}${result.stderr}`).not.toMatch(/warn/i);
    const env = { ...userEnv, PATH: `${join(globalPrefix, "bin")}:${userEnv.PATH}` };
    const version = await run(["kitten-mq", "--version"], { cwd: tempDir(), env });
    expect(version.stdout.trim()).toStartWith(`kitten-mq ${VERSION} `);
    const work = tempDir();
    const init = await run(["kitten-mq", "init-conf", join(work, "kitten-mq.config.json")], { cwd: work, env });
    expect(init.code).toBe(0);
    expect(JSON.parse(readFileSync(join(work, "kitten-mq.config.json"), "utf8")).socketServer.port).toBe(1234);
  }, SLOW);

  test("the launcher says what to do when the platform package is missing", async () => {
    // The launcher and its package.json alone: no platform package next to them.
    const alone = tempDir("kitten-npm-alone-");
    mkdirSync(join(alone, "node_modules/kitten-mq/bin"), { recursive: true });
    for (const file of ["bin/kitten-mq.cjs", "package.json"]) {
      copyFileSync(join(project, "node_modules/kitten-mq", file), join(alone, "node_modules/kitten-mq", file));
    }
    const result = await run(["node", join(alone, "node_modules/kitten-mq/bin/kitten-mq.cjs"), "--version"], { cwd: alone, env: userEnv });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`the package "${platformPackage}" that holds the binary for this platform is not installed`);
    expect(result.stderr).toContain(`npm install ${platformPackage}@${VERSION}`);
    // KITTEN_MQ_BINARY_PATH runs another binary instead.
    const binary = join(project, "node_modules", platformPackage, "bin/kitten-mq");
    const override = await run(["node", join(alone, "node_modules/kitten-mq/bin/kitten-mq.cjs"), "--version"], {
      cwd: alone,
      env: { ...userEnv, KITTEN_MQ_BINARY_PATH: binary },
    });
    expect(override.stdout.trim()).toStartWith(`kitten-mq ${VERSION} `);
  }, SLOW);

  describe("against a broker started by the install's kitten-mq start", () => {
    let broker: BinaryBroker;
    let work = "";
    let configPath = "";

    beforeAll(async () => {
      work = tempDir("kitten-npm-broker-");
      configPath = join(work, "kitten-mq.config.json");
      writeFileSync(configPath, JSON.stringify({ socketServer: { port: 0 }, httpServerPort: 0, durability: "memory", requeueInterval: 100 }));
      broker = await startBinaryBroker(join(project, "node_modules/.bin/kitten-mq"), configPath, work, "broker-1", userEnv);
    }, SLOW);

    test("the original README's snippet runs unchanged with require", async () => {
      writeFileSync(join(project, "snippet.cjs"), readFileSync(join(FIXTURES, "original_snippet.cjs")));
      const keys = join(tempDir(), "path_to_keys_directory");
      const result = await run(["node", "snippet.cjs"], { cwd: project, env: { ...userEnv, KITTEN_HOST: broker.host, KEYS_DIRECTORY: keys } });
      const events = result.stdout.split("\n").filter((l) => l.startsWith("event ")).map((l) => JSON.parse(l.slice(6)) as { event: string; value: unknown });
      const named = (name: string) => events.filter((e) => e.event === name);
      expect({ code: result.code, stderr: result.stderr, timeout: named("timeout") }).toEqual({ code: 0, stderr: "", timeout: [] });
      expect(named("connect").map((e) => e.value)).toEqual([null]);
      expect(named("send 120").map((e) => e.value)).toEqual([null]);
      expect(named("send *").map((e) => e.value)).toEqual([null]);
      expect(named("addId").map((e) => e.value)).toEqual([null]);
      expect(named("removeId").map((e) => e.value)).toEqual([null]);
      expect(named("error")).toEqual([]);
      // done(false) requeued the message: the consumer saw it again, with its count.
      const consumed = named("consume").map((e) => e.value as { msg: string; nbRequeues: number });
      expect(consumed[0]).toEqual({ msg: "coucou", nbRequeues: 0 });
      expect(consumed.some((c) => c.nbRequeues >= 1)).toBe(true);
      // The key pair was created on first connect, where the config said.
      expect(existsSync(join(keys, "key_name.pem")) && existsSync(join(keys, "key_name.pub"))).toBe(true);
      expect(statSync(join(keys, "key_name.pem")).mode & 0o777).toBe(0o600);
    }, SLOW);

    test("the promise API with import", async () => {
      writeFileSync(join(project, "promise.mjs"), readFileSync(join(FIXTURES, "promise.mjs")));
      const result = await run(["node", "promise.mjs"], { cwd: project, env: { ...userEnv, KITTEN_HOST: broker.host, KEYS_DIRECTORY: join(tempDir(), "keys") } });
      expect(result.stderr).toBe("");
      expect(result.code).toBe(0);
      expect(JSON.parse(result.stdout)).toEqual({ received: [{ id: "7", msg: { total: 12.5 } }], refused: "BAD_CHANNEL" });
    }, SLOW);

    test("kitten-mq status and a reload by signal go through the launcher", async () => {
      const status = await run([join(project, "node_modules/.bin/kitten-mq"), "status", "--config", configPath, "--json"], { cwd: work, env: userEnv });
      expect(status.code).toBe(0);
      expect(JSON.parse(status.stdout)).toMatchObject({ role: "master", stopping: false });
      // SIGUSR2 to the launcher reaches the broker, which reloads its file.
      broker.process.kill("SIGUSR2");
      await broker.waitForOutput("reloaded");
    }, SLOW);

    test("Deno, in the project outside the repository: deno check passes and the client runs", async () => {
      const deno = join(ROOT, "node_modules/.bin/deno");
      copyFileSync(join(FIXTURES, "deno_main.ts"), join(project, "deno_main.ts"));
      const env = { ...userEnv, DENO_NO_UPDATE_CHECK: "1" };
      const check = await run([deno, "check", "deno_main.ts"], { cwd: project, env });
      expect(check.code).toBe(0);
      const result = await run([deno, "run", "--allow-net", "--allow-read", "--allow-write", "deno_main.ts", broker.host], { cwd: project, env });
      expect(result.stderr).toBe("");
      expect(result.code).toBe(0);
      expect(JSON.parse(result.stdout)).toEqual({ message: { from: "deno" }, id: "1" });
    }, SLOW);

    test("Ctrl-C (SIGINT) to the launcher stops the broker cleanly, once, and leaves no process behind", async () => {
      const state = JSON.parse(readFileSync(join(work, "kitten-mq-data/admin.json"), "utf8")) as { pid: number };
      expect(state.pid).not.toBe(broker.process.pid); // the broker is the launcher's child
      // Forwarded as SIGTERM (the same clean stop), so that a terminal's Ctrl-C, which reaches
      // both processes, is not a second SIGINT that would kill the broker mid-stop.
      broker.process.kill("SIGINT");
      expect(await broker.process.exited).toBe(0);
      // The pipes may deliver the last lines a moment after the exit.
      const deadline = Date.now() + 5000;
      while (!/\] stopped/.test(broker.output()) && Date.now() < deadline) await Bun.sleep(10);
      expect(broker.output()).toContain("SIGTERM received;stopping");
      expect(broker.output()).toMatch(/\] stopped/);
      expect(() => process.kill(state.pid, 0)).toThrow();
      await broker.stop();
    }, SLOW);
  });

  test("tsc checks TypeScript files using the types (ES module and CommonJS), and refuses a misuse", async () => {
    for (const file of ["typed.mts", "typed.cts", "typed_wrong.mts"]) copyFileSync(join(FIXTURES, file), join(project, file));
    const tsconfig = (files: string[], skipLibCheck: boolean) => ({
      compilerOptions: {
        strict: true,
        noEmit: true,
        target: "ES2022",
        module: "nodenext",
        moduleResolution: "nodenext",
        skipLibCheck,
        types: ["node"],
        typeRoots: [join(ROOT, "node_modules/@types")],
      },
      files,
    });
    const tsc = (config: string) => run(["node", join(ROOT, "node_modules/typescript/bin/tsc"), "-p", config], { cwd: project, env: userEnv });
    writeFileSync(join(project, "tsconfig.json"), JSON.stringify(tsconfig(["typed.mts", "typed.cts"], false))); // the package's declarations checked too
    const good = await tsc("tsconfig.json");
    expect(good.stdout + good.stderr).toBe("");
    expect(good.code).toBe(0);
    writeFileSync(join(project, "tsconfig.wrong.json"), JSON.stringify(tsconfig(["typed_wrong.mts"], true)));
    const wrong = await tsc("tsconfig.wrong.json");
    expect(wrong.code).not.toBe(0);
    expect(wrong.stdout).toMatch(/typed_wrong\.mts\(5,\d+\): error TS2345/);
  }, SLOW);
});
