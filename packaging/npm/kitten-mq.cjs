#!/usr/bin/env node
/**
 * The `kitten-mq` command of the npm package: runs the compiled broker binary that npm installed
 * next to this package as one of its optional dependencies (`@kitten-mq/<os>-<cpu>`, selected by
 * npm through the `os` and `cpu` fields, as esbuild and Bun ship theirs). Node only starts it and
 * passes everything through: arguments, stdio, signals and the exit status.
 *
 * Plain CommonJS with no dependencies and no install script, so it runs on any Node >= 20.
 */
"use strict";

const { spawn } = require("node:child_process");
const { readFileSync } = require("node:fs");

const VERSION = require("../package.json").version;

/** `${process.platform} ${process.arch}` → the package holding the binary for it. */
const PLATFORM_PACKAGES = {
  "linux x64": "@kitten-mq/linux-x64",
  "linux arm64": "@kitten-mq/linux-arm64",
  "darwin arm64": "@kitten-mq/darwin-arm64",
};
/**
 * The build for x64 CPUs without AVX2. It is not an optional dependency: npm cannot select by CPU
 * feature, so it would be downloaded next to the default build on every x64 machine.
 */
const BASELINE_PACKAGE = "@kitten-mq/linux-x64-baseline";

function fail(message) {
  process.stderr.write(`kitten-mq: ${message}\n`);
  process.exit(1);
}

function hasAvx2() {
  try {
    return /\bavx2\b/.test(readFileSync("/proc/cpuinfo", "utf8"));
  } catch {
    return true; // unknown: try the default build
  }
}

function binaryIn(packageName) {
  try {
    return require.resolve(`${packageName}/bin/kitten-mq`);
  } catch {
    return null;
  }
}

function findBinary() {
  const override = process.env.KITTEN_MQ_BINARY_PATH;
  if (override) return override;

  const platform = `${process.platform} ${process.arch}`;
  const packageName = PLATFORM_PACKAGES[platform];
  if (!packageName) {
    const supported = Object.keys(PLATFORM_PACKAGES).map((key) => key.replace(" ", "-")).join(", ");
    fail(
      `Cannot start: no kitten-mq binary is published for ${process.platform}-${process.arch} ` +
        `(published: ${supported}). Set KITTEN_MQ_BINARY_PATH to a binary built with "npm run compile".`,
    );
  }
  if (platform === "linux x64" && !hasAvx2()) {
    const baseline = binaryIn(BASELINE_PACKAGE);
    if (baseline) return baseline;
    fail(
      `Cannot start: this CPU has no AVX2, which the default linux-x64 build needs. ` +
        `Install the baseline build next to kitten-mq: npm install ${BASELINE_PACKAGE}@${VERSION} ` +
        `(add -g for a global install).`,
    );
  }
  const binary = binaryIn(packageName);
  if (binary) return binary;
  fail(
    `Cannot start: the package "${packageName}" that holds the binary for this platform is not ` +
      `installed. npm installs it with kitten-mq unless optional dependencies are omitted ` +
      `(--omit=optional, --no-optional): reinstall without that option, or run ` +
      `npm install ${packageName}@${VERSION}.`,
  );
}

const binary = findBinary();
// The broker's runtime settings, unless the caller set its own: freed memory is kept during
// traffic and given back at a quiet moment, and the garbage collector is sized for a server
// process rather than for the whole machine's RAM (docs/durability.md, *Memory coming back*).
const env = {
  MIMALLOC_PURGE_DELAY: "3600000",
  BUN_JSC_forceRAMSize: "1073741824",
  ...process.env,
};
const child = spawn(binary, process.argv.slice(2), { stdio: "inherit", env });

// Signals sent to this process reach the broker (systemd, `kill`, a supervisor). Ctrl-C on a
// terminal reaches both processes already (same process group), and the broker stops on its
// first SIGINT but dies on a second one: forwarding SIGINT as SIGTERM, which stops it the same
// way, keeps a Ctrl-C from killing it before it has stopped cleanly.
const FORWARDED = { SIGINT: "SIGTERM", SIGTERM: "SIGTERM", SIGHUP: "SIGHUP", SIGQUIT: "SIGQUIT", SIGUSR1: "SIGUSR1", SIGUSR2: "SIGUSR2" };
const forwarders = {};
for (const [received, sent] of Object.entries(FORWARDED)) {
  forwarders[received] = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(sent);
  };
  process.on(received, forwarders[received]);
}

child.on("error", (error) => {
  fail(`Cannot start ${binary}: ${error.message}`);
});

child.on("exit", (code, signal) => {
  for (const [received, handler] of Object.entries(forwarders)) process.off(received, handler);
  if (signal) {
    // Die of the same signal, so whoever started us sees what the broker saw.
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code ?? 1);
});
