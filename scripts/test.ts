/**
 * `npm test`: runs every test runner (bun for the whole suite, deno for the client smoke suite,
 * node for the npm package's client), sums their results and prints `N passed, N failed` as the
 * last line. Exits non-zero when a test failed, a runner failed, or no test ran at all.
 *
 * Extra arguments are passed to `bun test` (for example a file or `-t "FrameDecoder"`), and only
 * bun runs then.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { stageMainPackage } from "./package.ts";
import { bunFailures } from "./test_failures.ts";

interface RunResult {
  name: string;
  passed: number;
  failed: number;
  exitCode: number;
  /** What the runner printed about each failed test, repeated at the end where a log's tail shows it. */
  failures: string[];
}

function run(
  name: string,
  command: string,
  args: string[],
  parse: (output: string) => [number, number],
  failuresOf: (output: string) => string[] = () => [],
): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, FORCE_COLOR: "0", NO_COLOR: "1" } });
    let output = "";
    const collect = (stream: NodeJS.WritableStream) => (chunk: Buffer) => {
      output += chunk.toString();
      stream.write(chunk);
    };
    child.stdout.on("data", collect(process.stdout));
    child.stderr.on("data", collect(process.stderr));
    child.on("error", (error) => {
      console.error(`${name}: cannot start "${command}": ${error.message}`);
      resolve({ name, passed: 0, failed: 0, exitCode: 127, failures: [] });
    });
    child.on("close", (code) => {
      const plain = output.replace(/\x1b\[[0-9;]*m/g, "");
      const [passed, failed] = parse(plain);
      resolve({ name, passed, failed, exitCode: code ?? 1, failures: failed > 0 ? failuresOf(plain) : [] });
    });
  });
}

/** The local binaries `npm ci` installed, so the script works without them on PATH. */
function local(name: string): string {
  const path = `node_modules/.bin/${name}`;
  return existsSync(path) ? path : name;
}

const bunArgs = process.argv.slice(2);
const results: RunResult[] = [];
results.push(
  await run(
    "bun",
    process.execPath,
    ["test", "--timeout", "20000", ...(bunArgs.length > 0 ? bunArgs : ["tests/"])],
    (out) => [Number(/^\s*(\d+) pass$/m.exec(out)?.[1] ?? 0), Number(/^\s*(\d+) fail$/m.exec(out)?.[1] ?? 0)],
    bunFailures,
  ),
);
if (bunArgs.length === 0) {
  results.push(
    await run(
      "deno",
      local("deno"),
      [
        "test", "--allow-net", "--allow-env", "--allow-read", "--allow-run", "--allow-write",
        // Named *_smoke.ts so that bun's discovery (*_test.ts) leaves them to deno.
        ...readdirSync("tests/deno").filter((name) => name.endsWith("_smoke.ts")).map((name) => `tests/deno/${name}`),
      ],
      (out) => {
        const match = /(\d+) passed.*?\| (\d+) failed/.exec(out);
        return match ? [Number(match[1]), Number(match[2])] : [0, 0];
      },
    ),
  );
}

if (bunArgs.length === 0) {
  // The Node suite tests the client as the npm package ships it: built here, installed where the
  // test files resolve "kitten-mq" (node_modules is ignored by git and by bun's test discovery).
  const packageDir = "tests/node/node_modules/kitten-mq";
  rmSync(packageDir, { recursive: true, force: true });
  const built = await stageMainPackage(packageDir).then(
    () => true,
    (error: Error) => {
      console.error(`node: cannot build the package's client: ${error.message}`);
      return false;
    },
  );
  if (built) {
    results.push(
      await run(
        "node",
        "node",
        ["--test", "--test-reporter=tap", ...readdirSync("tests/node").filter((name) => /_node\.(mjs|cjs)$/.test(name)).map((name) => `tests/node/${name}`)],
        (out) => [Number(/^# pass (\d+)$/m.exec(out)?.[1] ?? 0), Number(/^# fail (\d+)$/m.exec(out)?.[1] ?? 0)],
      ),
    );
  } else {
    results.push({ name: "node", passed: 0, failed: 1, exitCode: 1, failures: [] });
  }
}

const passed = results.reduce((n, r) => n + r.passed, 0);
const failed = results.reduce((n, r) => n + r.failed, 0);
const broken = results.filter((r) => r.exitCode !== 0 && r.failed === 0);
for (const r of results) {
  for (const failure of r.failures) console.log(`\n${r.name}: a failed test and what came before it\n${failure}\n`);
}
for (const r of results) console.log(`${r.name}: ${r.passed} passed, ${r.failed} failed (exit ${r.exitCode})`);
for (const r of broken) console.log(`${r.name} exited with ${r.exitCode} without reporting a failed test`);
const summary = `${passed} passed, ${failed} failed`;
mkdirSync(".test-output", { recursive: true });
writeFileSync(".test-output/summary.txt", summary + "\n");
console.log(summary);
process.exit(failed > 0 || broken.length > 0 || passed === 0 ? 1 : 0);
