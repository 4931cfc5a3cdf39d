/**
 * install.sh under a fake root (`--prefix`), the way an operator's `curl | sudo bash` lays out a
 * host: files and modes, the systemd unit, idempotent upgrades, the installed binary serving a
 * client, `--uninstall`, and the refusals (a missing binary, a checksum mismatch).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, lstatSync, readFileSync, readlinkSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { VERSION } from "../../src/version.ts";
import { cleanupAll, clientRoundTrip, ROOT, run, shipBinary, startBinaryBroker, tempDir } from "./helpers.ts";

const INSTALL = join(ROOT, "install.sh");
const APP = "var/www/kitten-mq";
/** install.sh copies a 110 MB file two or three times: slow disks need the time. */
const SLOW = 30_000;

let bin = "";

beforeAll(async () => {
  bin = await shipBinary();
}, 60_000);

afterAll(cleanupAll);

/** `bash install.sh ...args` with KITTEN_MQ_* unset unless given. */
function install(args: string[], env: Record<string, string | undefined> = {}) {
  return run(["bash", INSTALL, ...args], {
    env: { KITTEN_MQ_BINARY: undefined, KITTEN_MQ_VERSION: undefined, KITTEN_MQ_RELEASES: undefined, KITTEN_MQ_TARGET: undefined, ...env },
  });
}

const mode = (path: string) => statSync(path).mode & 0o777;
const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

describe("ship: install.sh --prefix", () => {
  let prefix = "";
  const at = (path: string) => join(prefix, path);

  beforeAll(() => {
    prefix = tempDir("kitten-prefix-");
  });

  test("installs the binary, config, folders, symlink and systemd unit", async () => {
    const result = await install(["--prefix", prefix, "--binary", bin]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`binary: kitten-mq ${VERSION} (protocol`);
    expect(result.stdout).toContain("wrote the default config");

    expect(mode(at(APP))).toBe(0o750);
    expect(statSync(at(APP)).isDirectory()).toBe(true);
    expect(mode(at(`${APP}/kitten-mq`))).toBe(0o755);
    expect(sha256(at(`${APP}/kitten-mq`))).toBe(sha256(bin));
    for (const folder of ["kitten-mq-data", "clients", "keys"]) {
      expect(statSync(at(`${APP}/${folder}`)).isDirectory()).toBe(true);
      expect(mode(at(`${APP}/${folder}`))).toBe(0o750);
    }
    // logsDirectory is accepted for compatibility only: logs go to journald, no folder is made.
    expect(existsSync(at(`${APP}/logs`))).toBe(false);

    // The config is init-conf's: valid JSON, documented, the defaults.
    const configPath = at(`${APP}/kitten-mq.config.json`);
    expect(mode(configPath)).toBe(0o640);
    const config = JSON.parse(readFileSync(configPath, "utf8"));
    expect(Array.isArray(config.$comment)).toBe(true);
    expect(config.socketServer.port).toBe(1234);
    expect(config.socketServer.host).toBe("127.0.0.1");
    expect(config.dataDirectory).toBe("kitten-mq-data");

    const link = at("usr/local/bin/kitten-mq");
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe("/var/www/kitten-mq/kitten-mq");
  }, SLOW);

  test("the systemd unit runs the broker hardened, as kitten-mq, with reload and a soft stop", () => {
    const unitPath = at("etc/systemd/system/kitten-mq.service");
    expect(mode(unitPath)).toBe(0o644);
    const unit = readFileSync(unitPath, "utf8");
    const lines = new Set(unit.split("\n"));
    for (const line of [
      "[Unit]",
      "[Service]",
      "[Install]",
      "WantedBy=multi-user.target",
      "User=kitten-mq",
      "Group=kitten-mq",
      "WorkingDirectory=/var/www/kitten-mq",
      "ExecStart=/var/www/kitten-mq/kitten-mq start --config /var/www/kitten-mq/kitten-mq.config.json",
      "ExecReload=/bin/kill -USR2 $MAINPID",
      "KillSignal=SIGTERM",
      "TimeoutStopSec=40",
      "Restart=on-failure",
      "Environment=MIMALLOC_PURGE_DELAY=3600000",
      "Environment=BUN_JSC_forceRAMSize=1073741824",
      "LimitNOFILE=65536",
      "NoNewPrivileges=yes",
      "CapabilityBoundingSet=",
      "ProtectSystem=strict",
      "ReadWritePaths=/var/www/kitten-mq",
      "ProtectHome=yes",
      "PrivateTmp=yes",
      "PrivateDevices=yes",
      "ProtectKernelTunables=yes",
      "ProtectKernelModules=yes",
      "ProtectControlGroups=yes",
      "RestrictSUIDSGID=yes",
      "LockPersonality=yes",
      "RestrictNamespaces=yes",
      "SystemCallArchitectures=native",
    ]) {
      expect(lines.has(line) ? line : `missing: ${line}`).toBe(line);
    }
    // The JIT writes code: this setting would kill the broker at start.
    expect(unit).not.toMatch(/^MemoryDenyWriteExecute/m);
    // The copy for packagers is the same file.
    expect(unit).toBe(readFileSync(join(ROOT, "packaging/kitten-mq.service"), "utf8"));
  });

  test.skipIf(!Bun.which("systemd-analyze"))("systemd-analyze verify accepts the unit", async () => {
    // verify wants ExecStart to exist: point it at the binary under the prefix.
    const unit = readFileSync(at("etc/systemd/system/kitten-mq.service"), "utf8").replace(
      "ExecStart=/var/www/kitten-mq/kitten-mq",
      `ExecStart=${at(`${APP}/kitten-mq`)}`,
    );
    const copy = join(tempDir(), "kitten-mq.service");
    writeFileSync(copy, unit);
    const result = await run(["systemd-analyze", "verify", copy]);
    expect(result.stderr).not.toMatch(/unknown|invalid|ignoring|failed/i);
    expect(result.code).toBe(0);
  }, SLOW);

  test("running it again (an upgrade) keeps the config, keys and data", async () => {
    const configPath = at(`${APP}/kitten-mq.config.json`);
    const edited = { ...JSON.parse(readFileSync(configPath, "utf8")), serviceId: "edited-broker" };
    writeFileSync(configPath, JSON.stringify(edited, null, 2));
    writeFileSync(at(`${APP}/keys/broker.marker`), "key");
    writeFileSync(at(`${APP}/kitten-mq-data/data.marker`), "data");
    writeFileSync(at(`${APP}/clients/client.marker`), "client");

    const result = await install(["--prefix", prefix, "--binary", bin]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("keeping the config");
    expect(result.stdout).toContain("is up to date");
    expect(JSON.parse(readFileSync(configPath, "utf8")).serviceId).toBe("edited-broker");
    expect(readFileSync(at(`${APP}/keys/broker.marker`), "utf8")).toBe("key");
    expect(readFileSync(at(`${APP}/kitten-mq-data/data.marker`), "utf8")).toBe("data");
    expect(readFileSync(at(`${APP}/clients/client.marker`), "utf8")).toBe("client");
    expect(mode(at(`${APP}/kitten-mq`))).toBe(0o755);
    expect(readlinkSync(at("usr/local/bin/kitten-mq"))).toBe("/var/www/kitten-mq/kitten-mq");
    expect(existsSync(at(`${APP}/.kitten-mq.new`))).toBe(false);
  }, SLOW);

  test(
    "the installed binary starts with the installed config and serves a client",
    async () => {
      // The installed config with ports 0, beside it: its relative paths resolve to the installed folders.
      const appDir = at(APP);
      const installed = JSON.parse(readFileSync(join(appDir, "kitten-mq.config.json"), "utf8"));
      const testConfig = join(appDir, "test.config.json");
      writeFileSync(testConfig, JSON.stringify({ ...installed, socketServer: { ...installed.socketServer, port: 0 }, httpServerPort: 0 }));

      const broker = await startBinaryBroker(join(appDir, "kitten-mq"), testConfig, appDir, "edited-broker");
      expect(await clientRoundTrip(broker, tempDir("kitten-ship-keys-"), 3)).toHaveLength(3);
      expect(existsSync(join(appDir, "kitten-mq-data", "admin.json"))).toBe(true);
      expect((await fetch(`${broker.adminUrl}/`)).status).toBe(200);
      expect(await broker.stop()).toBe(0);
    },
    30_000,
  );

  test("--uninstall removes the unit, binary and symlink and keeps the data folder", async () => {
    const result = await install(["--uninstall", "--prefix", prefix]);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`kept ${at(APP)}`);
    expect(existsSync(at("etc/systemd/system/kitten-mq.service"))).toBe(false);
    expect(existsSync(at(`${APP}/kitten-mq`))).toBe(false);
    expect(() => lstatSync(at("usr/local/bin/kitten-mq"))).toThrow();
    expect(statSync(at(APP)).isDirectory()).toBe(true);
    expect(JSON.parse(readFileSync(at(`${APP}/kitten-mq.config.json`), "utf8")).serviceId).toBe("edited-broker");
    expect(readFileSync(at(`${APP}/kitten-mq-data/data.marker`), "utf8")).toBe("data");

    // Uninstalling twice is harmless.
    expect((await install(["--uninstall", "--prefix", prefix])).code).toBe(0);
  }, SLOW);
});

describe("ship: install.sh refusals", () => {
  test("a missing --binary fails with a clear message and installs nothing", async () => {
    const prefix = tempDir("kitten-prefix-");
    const result = await install(["--prefix", prefix, "--binary", join(prefix, "no-such-binary")]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`kitten-mq install: error: --binary ${join(prefix, "no-such-binary")}: no such file`);
    expect(existsSync(join(prefix, "var"))).toBe(false);

    // KITTEN_MQ_BINARY is the same option.
    const fromEnv = await install(["--prefix", prefix], { KITTEN_MQ_BINARY: join(prefix, "nope") });
    expect(fromEnv.code).toBe(1);
    expect(fromEnv.stderr).toContain("no such file");
  }, SLOW);

  test("a file that is not an executable is refused before anything changes", async () => {
    const prefix = tempDir("kitten-prefix-");
    const script = join(prefix, "not-a-binary");
    writeFileSync(script, "#!/bin/sh\necho kitten-mq 9.9.9\n");
    const result = await install(["--prefix", prefix, "--binary", script]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("is not an executable (ELF or Mach-O)");
    expect(existsSync(join(prefix, "var"))).toBe(false);
  }, SLOW);

  test("bad arguments fail with usage", async () => {
    const unknown = await install(["--frobnicate"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("unknown argument: --frobnicate");
    expect(unknown.stderr).toContain("Usage: install.sh");
    const badVersion = await install(["--prefix", tempDir(), "--version", "one.two"]);
    expect(badVersion.code).toBe(1);
    expect(badVersion.stderr).toContain("expected X.Y.Z");
    const help = await install(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("--uninstall");
  }, SLOW);

  test.skipIf(!Bun.which("shellcheck"))("shellcheck finds nothing in install.sh", async () => {
    const result = await run(["shellcheck", INSTALL]);
    expect(result.stdout + result.stderr).toBe("");
    expect(result.code).toBe(0);
  }, SLOW);
});

describe("ship: install.sh downloads", () => {
  /** A fake release server: `/download/v<version>/<file>` from `files`; records the paths asked for. */
  function fakeReleases(files: Record<string, Uint8Array | string>) {
    const requests: string[] = [];
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch(request) {
        const path = new URL(request.url).pathname;
        requests.push(path);
        const body = files[path];
        return body === undefined ? new Response("not found", { status: 404 }) : new Response(body);
      },
    });
    return { url: `http://127.0.0.1:${server.port}`, requests, stop: () => server.stop(true) };
  }

  /** The asset install.sh picks on this host. */
  function hostAsset(): string {
    const os = process.platform === "darwin" ? "darwin" : "linux";
    const arch = process.arch === "arm64" ? "arm64" : "x64";
    const avx2 = os === "linux" && arch === "x64" && /\bavx2\b/.test(readFileSync("/proc/cpuinfo", "utf8"));
    return `kitten-mq-${os}-${arch}${os === "linux" && arch === "x64" && !avx2 ? "-baseline" : ""}`;
  }

  test("downloads the host's asset, checks it against SHA256SUMS and installs it", async () => {
    const body = readFileSync(bin);
    const asset = hostAsset();
    const releases = fakeReleases({
      [`/download/v${VERSION}/${asset}`]: body,
      [`/download/v${VERSION}/SHA256SUMS`]: `${sha256(bin)}  ${asset}\n${"1".repeat(64)}  kitten-mq-other\n`,
    });
    try {
      const prefix = tempDir("kitten-prefix-");
      const result = await install(["--prefix", prefix], { KITTEN_MQ_RELEASES: releases.url });
      expect(result.stderr).toBe("");
      expect(result.code).toBe(0);
      expect(result.stdout).toContain(`checksum OK (sha256 ${sha256(bin)}`);
      expect(releases.requests).toEqual([`/download/v${VERSION}/${asset}`, `/download/v${VERSION}/SHA256SUMS`]);
      expect(sha256(join(prefix, APP, "kitten-mq"))).toBe(sha256(bin));
      expect(mode(join(prefix, APP, "kitten-mq"))).toBe(0o755);
    } finally {
      releases.stop();
    }
  }, SLOW);

  // The checksum is checked before the file is run: a small stand-in does for the refusals.
  const standIn = "\x7fELF not really a binary";

  test("a checksum mismatch is refused and nothing is installed", async () => {
    const body = standIn;
    const releases = fakeReleases({
      [`/download/v${VERSION}/kitten-mq-linux-x64`]: body,
      [`/download/v${VERSION}/SHA256SUMS`]: `${"0".repeat(64)}  kitten-mq-linux-x64\n`,
    });
    try {
      const prefix = tempDir("kitten-prefix-");
      const result = await install(["--prefix", prefix], { KITTEN_MQ_RELEASES: releases.url, KITTEN_MQ_TARGET: "linux-x64" });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`checksum mismatch for kitten-mq-linux-x64: SHA256SUMS says ${"0".repeat(64)}`);
      expect(result.stderr).toContain("refusing to install it");
      expect(existsSync(join(prefix, "var"))).toBe(false);
    } finally {
      releases.stop();
    }
  }, SLOW);

  test("an asset missing from SHA256SUMS, or no SHA256SUMS at all, is refused", async () => {
    const body = standIn;
    const releases = fakeReleases({
      [`/download/v${VERSION}/kitten-mq-linux-arm64`]: body,
      [`/download/v${VERSION}/SHA256SUMS`]: `${createHash("sha256").update(body).digest("hex")}  kitten-mq-linux-x64\n`,
      "/download/v9.0.0/kitten-mq-linux-arm64": body,
    });
    try {
      const prefix = tempDir("kitten-prefix-");
      const env = { KITTEN_MQ_RELEASES: releases.url, KITTEN_MQ_TARGET: "linux-arm64" };
      const noLine = await install(["--prefix", prefix], env);
      expect(noLine.code).toBe(1);
      expect(noLine.stderr).toContain("SHA256SUMS of the release has no line for kitten-mq-linux-arm64");
      const noSums = await install(["--prefix", prefix, "--version", "v9.0.0"], env);
      expect(noSums.code).toBe(1);
      expect(noSums.stderr).toContain("SHA256SUMS: refusing to install a binary that cannot be verified");
      const noRelease = await install(["--prefix", prefix, "--version", "9.9.9"], env);
      expect(noRelease.code).toBe(1);
      expect(noRelease.stderr).toContain(`cannot download ${releases.url}/download/v9.9.9/kitten-mq-linux-arm64`);
      const latest = await install(["--prefix", prefix, "--version", "latest"], env);
      expect(latest.code).toBe(1);
      expect(releases.requests.at(-1)).toBe("/latest/download/kitten-mq-linux-arm64");
      expect(existsSync(join(prefix, "var"))).toBe(false);
    } finally {
      releases.stop();
    }
  }, SLOW);
});
