/**
 * install.sh --instances N under a fake root (`--prefix`): several brokers on one host, one per
 * core, each the broker of its own group (docs/cluster.md, "Every core"). The instance folders,
 * configs and ports, the template unit and its enable links, upgrades that keep edited configs,
 * configs the broker accepts (its loader, and the installed binary elected master of each group
 * on a real etcd), `--uninstall`, and the refusals.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, lstatSync, readdirSync, readFileSync, readlinkSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { loadConfigFile } from "../../src/server/config/config.ts";
import { startEtcd } from "../helpers/etcd.ts";
import { freePort } from "../helpers/ports.ts";
import { cleanupAll, ROOT, run, shipBinary, startBinaryBroker, tempDir } from "./helpers.ts";

const INSTALL = join(ROOT, "install.sh");
const APP = "var/www/kitten-mq";
const TEMPLATE = "etc/systemd/system/kitten-mq@.service";
const WANTS = "etc/systemd/system/multi-user.target.wants";
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
    env: {
      KITTEN_MQ_BINARY: undefined,
      KITTEN_MQ_VERSION: undefined,
      KITTEN_MQ_RELEASES: undefined,
      KITTEN_MQ_TARGET: undefined,
      KITTEN_MQ_HOSTNAME: undefined,
      ...env,
    },
  });
}

const mode = (path: string) => statSync(path).mode & 0o777;
const readJson = (path: string) => JSON.parse(readFileSync(path, "utf8"));
const instanceConfig = (prefix: string, i: number) => join(prefix, APP, "instances", String(i), "kitten-mq.config.json");
/** The instance numbers enabled under `prefix` (links in multi-user.target.wants), sorted. */
function enabled(prefix: string): string[] {
  const wants = join(prefix, WANTS);
  if (!existsSync(wants)) return [];
  return readdirSync(wants).filter((name) => name.startsWith("kitten-mq@")).sort();
}

describe("ship: install.sh --instances 3 --etcd --peers (host b of a, b, c)", () => {
  let prefix = "";
  const at = (path: string) => join(prefix, path);
  const ETCD = ["http://127.0.0.1:2379", "http://10.0.0.2:2379"];
  const args = () => ["--prefix", prefix, "--binary", bin, "--instances", "3", "--etcd", ETCD.join(","), "--peers", "a,b,c"];
  const env = { KITTEN_MQ_HOSTNAME: "b" };

  beforeAll(() => {
    prefix = tempDir("kitten-prefix-");
  });

  test("writes one config per instance: its ports, serviceId, group, etcd and the same instance of the other hosts", async () => {
    const result = await install(args(), env);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);

    const ports: number[] = [];
    for (const i of [1, 2, 3]) {
      const path = instanceConfig(prefix, i);
      expect(mode(path)).toBe(0o640);
      const config = readJson(path);
      expect(config.serviceId).toBe(`b-${i}`);
      expect(config.isMaster).toBe(false);
      expect(config.socketServer).toEqual({ host: "0.0.0.0", port: 1234 + i - 1 });
      expect(config.httpServerPort).toBe(8080 + i - 1);
      expect(config.dataDirectory).toBe("kitten-mq-data");
      expect(config.cluster).toEqual({
        group: `g${i}`,
        // This host (b) is left out of its own peers.
        peers: [`a:${1233 + i}@a-${i}`, `c:${1233 + i}@c-${i}`],
        minInSyncReplicas: 2,
        etcd: { endpoints: ETCD, prefix: "kitten-mq/", leaseTtlSeconds: 3 },
        advertise: `b:${1233 + i}`,
      });
      ports.push(config.socketServer.port, config.httpServerPort);
      expect(result.stdout).toContain(`wrote ${path} (serviceId b-${i}, port ${1233 + i}, admin port ${8079 + i}`);

      for (const folder of ["kitten-mq-data", "clients", "keys"]) {
        const dir = at(`${APP}/instances/${i}/${folder}`);
        expect(statSync(dir).isDirectory()).toBe(true);
        expect(mode(dir)).toBe(0o750);
      }
      expect(mode(at(`${APP}/instances/${i}`))).toBe(0o750);
    }
    expect(new Set(ports).size).toBe(6);

    // The binary and the command as for one broker, but neither the single unit nor its config.
    expect(mode(at(`${APP}/kitten-mq`))).toBe(0o755);
    expect(readlinkSync(at("usr/local/bin/kitten-mq"))).toBe("/var/www/kitten-mq/kitten-mq");
    expect(existsSync(at("etc/systemd/system/kitten-mq.service"))).toBe(false);
    expect(existsSync(at(`${APP}/kitten-mq.config.json`))).toBe(false);
  }, SLOW);

  test("installs the template unit kitten-mq@.service and enables kitten-mq@1..3", () => {
    const unitPath = at(TEMPLATE);
    expect(mode(unitPath)).toBe(0o644);
    const unit = readFileSync(unitPath, "utf8");
    const lines = new Set(unit.split("\n"));
    for (const line of [
      "Description=Kitten-MQ message broker, instance %i",
      "AssertPathExists=/var/www/kitten-mq/instances/%i/kitten-mq.config.json",
      "User=kitten-mq",
      "WorkingDirectory=/var/www/kitten-mq/instances/%i",
      "ExecStart=/var/www/kitten-mq/kitten-mq start --config /var/www/kitten-mq/instances/%i/kitten-mq.config.json",
      "ExecReload=/bin/kill -USR2 $MAINPID",
      "KillSignal=SIGTERM",
      "ProtectSystem=strict",
      // Each instance writes its own folder only.
      "ReadWritePaths=/var/www/kitten-mq/instances/%i",
      "NoNewPrivileges=yes",
      "WantedBy=multi-user.target",
    ]) {
      expect(lines.has(line) ? line : `missing: ${line}`).toBe(line);
    }
    expect(unit).not.toMatch(/^MemoryDenyWriteExecute/m);
    // The copy for packagers is the same file.
    expect(unit).toBe(readFileSync(join(ROOT, "packaging/kitten-mq@.service"), "utf8"));

    // What `systemctl enable kitten-mq@1 kitten-mq@2 kitten-mq@3` makes.
    expect(enabled(prefix)).toEqual(["kitten-mq@1.service", "kitten-mq@2.service", "kitten-mq@3.service"]);
    for (const name of enabled(prefix)) {
      expect(readlinkSync(join(prefix, WANTS, name))).toBe("/etc/systemd/system/kitten-mq@.service");
    }
  });

  test("the broker's config loader accepts every instance's config, each with its own folders", async () => {
    const folders = new Set<string>();
    for (const i of [1, 2, 3]) {
      const config = await loadConfigFile(instanceConfig(prefix, i));
      const base = at(`${APP}/instances/${i}`);
      expect(config.dataDirectory).toBe(join(base, "kitten-mq-data"));
      expect(config.registeredClientsPath).toBe(join(base, "clients"));
      expect(config.keysDirectory).toBe(join(base, "keys"));
      expect(config.cluster.group).toBe(`g${i}`);
      expect(config.cluster.etcd?.endpoints).toEqual(ETCD);
      for (const folder of [config.dataDirectory, config.registeredClientsPath, config.keysDirectory]) folders.add(folder);
    }
    expect(folders.size).toBe(9);
  });

  test.skipIf(!Bun.which("systemd-analyze"))("systemd-analyze verify accepts an instance of the template", async () => {
    // verify wants ExecStart to exist: point it at the binary under the prefix.
    const unit = readFileSync(at(TEMPLATE), "utf8").replace("ExecStart=/var/www/kitten-mq/kitten-mq", `ExecStart=${at(`${APP}/kitten-mq`)}`);
    const dir = tempDir();
    writeFileSync(join(dir, "kitten-mq@.service"), unit);
    writeFileSync(join(dir, "kitten-mq@2.service"), unit);
    const result = await run(["systemd-analyze", "verify", join(dir, "kitten-mq@2.service")]);
    expect(result.stderr).not.toMatch(/unknown|invalid|ignoring|failed/i);
    expect(result.code).toBe(0);
  }, SLOW);

  test("running it again (an upgrade) keeps every config, even edited, and the data", async () => {
    const path = instanceConfig(prefix, 2);
    const edited = { ...readJson(path), serviceId: "edited-2", httpServerPort: 9999 };
    writeFileSync(path, JSON.stringify(edited, null, 2));
    const before = [1, 3].map((i) => readFileSync(instanceConfig(prefix, i), "utf8"));
    writeFileSync(at(`${APP}/instances/2/kitten-mq-data/data.marker`), "data");
    writeFileSync(at(`${APP}/instances/3/keys/broker.marker`), "key");

    const result = await install(args(), env);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    for (const i of [1, 2, 3]) expect(result.stdout).toContain(`keeping the config ${instanceConfig(prefix, i)} (instance ${i})`);
    expect(result.stdout).not.toContain("wrote ");
    expect(result.stdout).toContain(`systemd unit ${at(TEMPLATE)} is up to date`);
    expect(readJson(path)).toEqual(edited);
    expect([1, 3].map((i) => readFileSync(instanceConfig(prefix, i), "utf8"))).toEqual(before);
    expect(readFileSync(at(`${APP}/instances/2/kitten-mq-data/data.marker`), "utf8")).toBe("data");
    expect(readFileSync(at(`${APP}/instances/3/keys/broker.marker`), "utf8")).toBe("key");
    expect(enabled(prefix)).toHaveLength(3);
  }, SLOW);

  test("fewer instances than installed: the ones beyond are named, not touched", async () => {
    const third = readFileSync(instanceConfig(prefix, 3), "utf8");
    const result = await install([...args().slice(0, 5), "2", ...args().slice(6)], env);
    expect(result.code).toBe(0);
    expect(result.stderr).toContain("instance 3 (/var/www/kitten-mq/instances/3) is beyond --instances 2");
    expect(result.stderr).toContain("systemctl disable --now kitten-mq@3");
    expect(readFileSync(instanceConfig(prefix, 3), "utf8")).toBe(third);
  }, SLOW);

  test("--uninstall removes the template unit, every enable link, the binary and symlink; keeps the instances' folders", async () => {
    const result = await install(["--uninstall", "--prefix", prefix]);
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`removed ${at(TEMPLATE)}`);
    expect(existsSync(at(TEMPLATE))).toBe(false);
    expect(enabled(prefix)).toEqual([]);
    expect(existsSync(at(`${APP}/kitten-mq`))).toBe(false);
    expect(() => lstatSync(at("usr/local/bin/kitten-mq"))).toThrow();
    expect(readJson(instanceConfig(prefix, 2)).serviceId).toBe("edited-2");
    expect(readFileSync(at(`${APP}/instances/2/kitten-mq-data/data.marker`), "utf8")).toBe("data");

    // Uninstalling twice is harmless.
    const again = await install(["--uninstall", "--prefix", prefix]);
    expect(again.code).toBe(0);
    expect(again.stdout).not.toContain("removed");
  }, SLOW);
});

describe("ship: install.sh --instances 1 without etcd", () => {
  test("one broker in the group default, a lone master, accepted by the loader", async () => {
    const prefix = tempDir("kitten-prefix-");
    const result = await install(["--prefix", prefix, "--binary", bin, "--instances", "1", "--base-port", "4100", "--admin-base-port", "4200"], {
      KITTEN_MQ_HOSTNAME: "solo",
    });
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    const path = instanceConfig(prefix, 1);
    const written = readJson(path);
    expect(written.serviceId).toBe("solo-1");
    expect(written.isMaster).toBe(true);
    expect(written.socketServer).toEqual({ host: "127.0.0.1", port: 4100 });
    expect(written.httpServerPort).toBe(4200);
    expect(written.cluster).toEqual({ group: "default", peers: [], minInSyncReplicas: 1, etcd: null, advertise: null });
    const config = await loadConfigFile(path);
    expect(config.cluster.group).toBe("default");
    expect(enabled(prefix)).toEqual(["kitten-mq@1.service"]);
  }, SLOW);
});

/** `count` consecutive ports that were free a moment ago, none of them in `avoid`. */
async function freeRange(count: number, avoid: number[] = []): Promise<number> {
  const isFree = (port: number) =>
    new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once("error", () => resolve(false));
      server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
    });
  for (let attempt = 0; attempt < 50; attempt++) {
    const first = await freePort();
    const ports = Array.from({ length: count }, (_, k) => first + k);
    if (ports.at(-1)! > 65535 || ports.some((port) => avoid.includes(port))) continue;
    if ((await Promise.all(ports.slice(1).map(isFree))).every(Boolean)) return first;
  }
  throw new Error(`no ${count} consecutive free ports found`);
}

describe("ship: the installed binary on the instances' configs", () => {
  test(
    "each instance starts on its config as written and is elected master of its own group through etcd",
    async () => {
      const etcd = await startEtcd();
      const brokers: Awaited<ReturnType<typeof startBinaryBroker>>[] = [];
      try {
        const prefix = tempDir("kitten-prefix-");
        const base = await freeRange(2);
        const adminBase = await freeRange(2, [base, base + 1]);
        const result = await install(
          ["--prefix", prefix, "--binary", bin, "--instances", "2", "--etcd", etcd.endpoints.join(","), "--base-port", String(base), "--admin-base-port", String(adminBase)],
          { KITTEN_MQ_HOSTNAME: "ship-host" },
        );
        expect(result.stderr).toBe("");
        expect(result.code).toBe(0);

        // As kitten-mq@<i> runs it: the installed binary, in the instance's folder, on its file.
        for (const i of [1, 2]) {
          const dir = join(prefix, APP, "instances", String(i));
          brokers.push(await startBinaryBroker(join(prefix, APP, "kitten-mq"), join(dir, "kitten-mq.config.json"), dir, `ship-host-${i}`));
        }
        for (const [index, broker] of brokers.entries()) {
          const i = index + 1;
          expect(broker.port).toBe(base + index);
          expect(broker.adminUrl).toBe(`http://127.0.0.1:${adminBase + index}`);
          await broker.waitForOutput(`"ship-host-${i}" elected master through etcd`);
          const status = (await (await fetch(`${broker.adminUrl}/status`)).json()) as {
            serviceId: string;
            role: string;
            cluster: { mode: string; group: string };
          };
          expect(status.serviceId).toBe(`ship-host-${i}`);
          expect(status.role).toBe("master");
          expect(status.cluster).toMatchObject({ mode: "etcd", group: `g${i}` });
          expect(broker.output()).not.toContain("isMaster is ignored");
          expect(existsSync(join(prefix, APP, "instances", String(i), "kitten-mq-data", "admin.json"))).toBe(true);
        }
        for (const broker of brokers.splice(0)) expect(await broker.stop()).toBe(0);
      } finally {
        for (const broker of brokers) await broker.stop();
        await etcd.cleanup();
      }
    },
    60_000,
  );
});

describe("ship: install.sh --instances refusals", () => {
  /** Refused with `message` on stderr, exit 1, and nothing created under the prefix. */
  async function refused(args: string[], message: string) {
    const prefix = tempDir("kitten-prefix-");
    const result = await install(["--prefix", prefix, "--binary", bin, ...args]);
    expect(result.stderr).toContain(`kitten-mq install: error: ${message}`);
    expect(result.code).toBe(1);
    expect(result.stdout).toBe("");
    expect(readdirSync(prefix)).toEqual([]);
  }

  test.each(["0", "257", "-1", "abc", "2.5", "03", "1e2", " 3"])("--instances %p is refused", async (n) => {
    await refused(["--instances", n, "--etcd", "http://127.0.0.1:2379"], `--instances ${n}: expected a whole number of broker processes from 1 to 256`);
  }, SLOW);

  test("--instances without a number is refused", async () => {
    await refused(["--instances="], "--instances needs a number (1 to 256)");
    await refused(["--instances", ""], "--instances needs a number (1 to 256)");
  }, SLOW);

  test("more than one instance without --etcd is refused: the groups g2... need etcd", async () => {
    await refused(["--instances", "2"], `--instances 2 needs --etcd URL[,URL...]: each instance leads its own group (g1 ... g2)`);
    await refused(["--instances", "4", "--peers", "a,b"], "--instances 4 needs --etcd");
  }, SLOW);

  test("bad --etcd, --peers and port options are refused", async () => {
    await refused(["--instances", "1", "--peers", "a,b"], "--peers needs --etcd");
    await refused(["--etcd", "http://127.0.0.1:2379"], "--etcd, --peers, --base-port and --admin-base-port go with --instances N");
    await refused(["--instances", "2", "--etcd", "ftp://10.0.0.1"], `--etcd: "ftp://10.0.0.1" is not an etcd client URL`);
    await refused(["--instances", "2", "--etcd", "http://a:2379,"], "--etcd http://a:2379,: an empty URL in the list");
    const etcd = ["--etcd", "http://a:2379"];
    await refused(["--instances", "2", ...etcd, "--peers", "a,b,a"], "--peers lists a twice");
    await refused(["--instances", "2", ...etcd, "--peers", "a,[::1]"], `--peers: "[::1]" cannot name a host in a serviceId`);
    await refused(["--instances", "2", ...etcd, "--base-port", "80"], "--base-port 80: expected a port from 1024 to 65534");
    await refused(["--instances", "3", ...etcd, "--admin-base-port", "65534"], "--admin-base-port 65534: expected a port from 1024 to 65533");
    await refused(["--instances", "3", ...etcd, "--base-port", "8078"], "client ports 8078-8080 and admin ports 8080-8082 overlap");
  }, SLOW);

  test("a host name that cannot go into a serviceId is refused", async () => {
    const prefix = tempDir("kitten-prefix-");
    const result = await install(["--prefix", prefix, "--binary", bin, "--instances", "1"], { KITTEN_MQ_HOSTNAME: "bad/name" });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`this host's name "bad/name" cannot go into a serviceId`);
    expect(readdirSync(prefix)).toEqual([]);
  }, SLOW);

  test("the help names the options", async () => {
    const help = await install(["--help"]);
    expect(help.code).toBe(0);
    for (const option of ["--instances N", "--etcd URL", "--peers HOST", "--base-port P", "--admin-base-port A"]) expect(help.stdout).toContain(option);
  });
});
