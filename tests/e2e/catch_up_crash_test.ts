/**
 * Catch-up from a position when brokers die with kill -9 (subprocess brokers, fsync,
 * minInSyncReplicas 2): a master killed while a slave catches up from its position, a slave left
 * ahead of the master elected after a kill, slaves whose position the master cannot serve, and a
 * snapshot cut short by the kill of the slave receiving it. Every test counts what was confirmed
 * against what a consumer gets in the end (nothing may be lost) and checks which catch-up each
 * slave got, from the brokers' GET /status and their log lines.
 */
import { afterEach, expect, it } from "bun:test";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client, type KittenError } from "../../mod.ts";
import { Cleanup, clientOptions, freePort, waitFor } from "../helpers/broker.ts";
import { type ChildBroker, kill9, spawnBroker } from "../helpers/crash.ts";
import { type EtcdCluster, startEtcd } from "../helpers/etcd.ts";
import { type Relay, startRelay } from "../helpers/relay.ts";
import { TempDirs } from "../helpers/temp_dir.ts";
import type { ClusterStatus } from "../../src/server/cluster/cluster.ts";
import type { ReplicaStatus } from "../../src/server/cluster/replication.ts";

const cleanup = new Cleanup();
const temps = new TempDirs("kitten-catch-up-crash-");
const brokers: Proc[] = [];
const etcds: EtcdCluster[] = [];

afterEach(async () => {
  await cleanup.run(); // clients and relays first
  for (const broker of brokers.splice(0)) await broker.kill();
  for (const etcd of etcds.splice(0)) await etcd.cleanup();
  temps.removeAll();
});

// ── subprocess brokers that know each other through cluster.peers ────────────────────────────

/** What GET /status answers, as far as these tests read it. */
interface Status {
  role: "master" | "slave";
  cluster: ClusterStatus;
}

/** One broker: its ports and folder stay, so a restart is the same broker coming back. */
class Proc {
  child: ChildBroker | null = null;
  /** What earlier lives of this broker wrote; `output()` adds the running one's. */
  #earlier = "";
  peers: string[] = [];
  readonly configPath: string;

  constructor(
    readonly name: string,
    readonly port: number,
    readonly adminPort: number,
    readonly dir: string,
    public settings: Record<string, unknown>,
  ) {
    this.configPath = join(dir, "broker.json");
  }

  get host(): string {
    return `127.0.0.1:${this.port}@${this.name}`;
  }

  /** Writes the config file (a reload reads it again). */
  writeConfig(): void {
    const cluster = this.settings.cluster as Record<string, unknown> | undefined;
    mkdirSync(this.dir, { recursive: true });
    writeFileSync(
      this.configPath,
      JSON.stringify({
        serviceId: this.name,
        keysDirectory: join(this.dir, "keys"),
        registeredClientsPath: join(this.dir, "clients"),
        dataDirectory: join(this.dir, "data"),
        durability: "fsync",
        prefetch: 1000,
        logLevel: 2, // the catch-up plans are info lines
        isManagementInterface: true,
        httpServerPort: this.adminPort,
        admin: { host: "127.0.0.1" },
        ...this.settings,
        socketServer: { port: this.port, host: "127.0.0.1" },
        cluster: { minInSyncReplicas: 2, ...cluster, peers: this.peers },
      }),
    );
  }

  /** Starts the process; resolves once its admin API answers. */
  async start(): Promise<this> {
    if (this.running) throw new Error(`${this.name} already runs`);
    this.writeConfig();
    this.child = await spawnBroker(this.configPath, 20_000);
    await waitFor(() => this.output().includes(`admin on http://127.0.0.1:${this.adminPort}`), 10_000, `${this.name}'s admin API`);
    return this;
  }

  get running(): boolean {
    return this.child !== null && this.child.proc.exitCode === null && this.child.proc.signalCode === null;
  }

  /** SIGKILL (a stopped process too), and wait until it is gone. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child) return;
    if (this.running) await kill9(child);
    this.#earlier += child.output();
    this.child = null;
  }

  /** SIGTERM: a graceful stop (the broker saves its replication position); resolves once it exited 0. */
  async stop(): Promise<void> {
    const child = this.child;
    if (!child || !this.running) throw new Error(`${this.name} is not running`);
    child.proc.kill("SIGTERM");
    const code = await child.exited;
    this.#earlier += child.output();
    this.child = null;
    if (code !== 0) throw new Error(`${this.name} exited with ${code} after SIGTERM:\n${child.output()}`);
  }

  /** SIGSTOP: the process keeps its sockets and answers nothing; `resume()` continues it. */
  pause(): void {
    this.child?.proc.kill("SIGSTOP");
  }

  resume(): void {
    this.child?.proc.kill("SIGCONT");
  }

  /** Everything every life of this broker wrote. */
  output(): string {
    return this.#earlier + (this.child?.output() ?? "");
  }

  async #get(path: string): Promise<Response> {
    return await fetch(`http://127.0.0.1:${this.adminPort}${path}`, { signal: AbortSignal.timeout(2_000) });
  }

  async status(): Promise<Status> {
    return (await (await this.#get("/status")).json()) as Status;
  }

  /** The status, or null while the process does not answer (starting, killed). */
  async statusOrNull(): Promise<Status | null> {
    if (!this.running) return null;
    try {
      return await this.status();
    } catch {
      return null;
    }
  }

  /** Messages of `queue` in this broker's store (0 for a queue it never saw). */
  async stored(queue: string): Promise<number> {
    const response = await this.#get(`/queues/${queue}`);
    if (response.status === 404) return 0;
    return ((await response.json()) as { disk: { messages: number } }).disk.messages;
  }

  /** The replica `name` as this broker, master, sees it. */
  async replica(name: string): Promise<ReplicaStatus | undefined> {
    return (await this.statusOrNull())?.cluster.replicas.find((r) => r.peer === name);
  }

  /** `isMaster` in the file, then POST /reload (`force`: even when this slave is not in sync). */
  async promote(force = false): Promise<void> {
    this.settings = { ...this.settings, isMaster: true };
    this.writeConfig();
    const response = await fetch(`http://127.0.0.1:${this.adminPort}/reload${force ? "?force=true" : ""}`, { method: "POST" });
    if (!response.ok) throw new Error(`${this.name} refused the promotion: ${await response.text()}`);
  }

  /** `isMaster` false in the file, for its next start. */
  demote(): void {
    this.settings = { ...this.settings, isMaster: false };
  }
}

/**
 * `count` brokers that list each other as peers (a test may change a broker's `peers` before it
 * starts it), not started: in manual mode the first is master; with `etcd`, etcd elects.
 */
async function brokersOf(count: number, settings: Record<string, unknown> = {}, options: { etcd?: EtcdCluster } = {}): Promise<Proc[]> {
  const root = temps.make();
  const procs: Proc[] = [];
  for (let i = 0; i < count; i++) {
    const cluster = {
      ...(settings.cluster as Record<string, unknown> | undefined),
      ...(options.etcd ? { etcd: { endpoints: options.etcd.endpoints, leaseTtlSeconds: 2 } } : {}),
    };
    const proc = new Proc(`b${i}`, await freePort(), await freePort(), join(root, `b${i}`), {
      ...settings,
      isMaster: options.etcd ? false : i === 0,
      cluster,
    });
    procs.push(proc);
    brokers.push(proc);
  }
  for (const proc of procs) {
    proc.peers = procs.filter((other) => other !== proc).map((other) => other.host);
  }
  return procs;
}

async function startAll(procs: Proc[]): Promise<void> {
  await Promise.all(procs.map((proc) => proc.start()));
}

/** A relay in front of `proc`'s port (tests/helpers/relay.ts), closed after the test. */
async function relayTo(proc: Proc): Promise<Relay> {
  const relay = await startRelay(proc.port);
  cleanup.defer(() => relay.close());
  return relay;
}

async function etcd(): Promise<EtcdCluster> {
  const started = await startEtcd();
  etcds.push(started);
  return started;
}

/** Resolves once `master` says every broker named is an in-sync replica of it. */
async function inSync(master: Proc, names: string[], timeoutMs = 15_000): Promise<void> {
  await waitFor(async () => {
    const status = await master.statusOrNull();
    return status?.role === "master" && names.every((name) => status.cluster.replicas.some((r) => r.peer === name && r.state === "in-sync"));
  }, timeoutMs, `${names.join(", ")} in sync with ${master.name}`);
}

/** Resolves once every replica of `master` has acknowledged everything it was sent. */
async function acknowledged(master: Proc, timeoutMs = 10_000): Promise<void> {
  await waitFor(async () => (await master.status()).cluster.replicas.every((r) => r.lagEntries === 0), timeoutMs, `${master.name}'s replicas acknowledged`);
}

/** The running broker that says it is master (etcd mode: the last one elected). */
async function masterAmong(procs: Proc[], timeoutMs = 15_000): Promise<Proc> {
  let found: Proc | undefined;
  await waitFor(async () => {
    for (const proc of procs) {
      if ((await proc.statusOrNull())?.role === "master") found = proc;
    }
    return found;
  }, timeoutMs, "a master among the running brokers");
  return found!;
}

/** The master's catch-up plans for `peer`, oldest first: "position" or the snapshot's reason. */
function plansFor(master: Proc, peer: string): string[] {
  const plans: string[] = [];
  for (const line of master.output().split("\n")) {
    if (line.includes(`peer=${peer};catching up from index `)) plans.push("position");
    const snapshot = new RegExp(`peer=${peer};catching up;snapshot=\\d+ messages;index=\\d+;because (.*)$`).exec(line);
    if (snapshot) plans.push(`snapshot: ${snapshot[1]}`);
  }
  return plans;
}

const NO_POSITION = "snapshot: it holds no position (a new store, a memory-only broker, or an older version)";

// ── clients ──────────────────────────────────────────────────────────────────────────────────

async function client(hosts: string[]): Promise<Client> {
  const mq = new Client();
  mq.on("error", (_error: KittenError) => {}); // killed brokers are expected here
  cleanup.add(mq);
  await mq.connect(clientOptions({ host: hosts[0]! }, { hosts, reconnectDelayMs: 10, maxReconnectDelayMs: 50, maxPendingMessages: 50_000 }));
  return mq;
}

/**
 * Sends `{ n }` to `<queue>/x` and records each n confirmed in `confirmed` (and each send the
 * client gave up on in `failures`). The client keeps a refused or cut-off send and sends it again
 * (same message id) until it is confirmed, across kills and failovers.
 */
function sender(mq: Client, queue: string) {
  const channel = `${queue}/x`;
  const confirmed = new Set<number>();
  const failures: string[] = [];
  const inFlight = new Set<Promise<unknown>>();
  const send = (n: number) => {
    const sent = mq.send(channel, { n }).then(() => confirmed.add(n), (error: KittenError) => failures.push(`${n}: ${error.code}`));
    inFlight.add(sent);
    sent.finally(() => inFlight.delete(sent));
    return sent;
  };
  return {
    confirmed,
    failures,
    /** Sends [from, to) without waiting. */
    start(from: number, to: number): void {
      for (let n = from; n < to; n++) send(n);
    },
    /** Sends [from, to) and resolves once each is confirmed (or failed). */
    async sendAll(from: number, to: number, window = 2_000): Promise<void> {
      for (let start = from; start < to; start += window) {
        const batch: Promise<unknown>[] = [];
        for (let n = start; n < Math.min(to, start + window); n++) batch.push(send(n));
        await Promise.all(batch);
      }
    },
    /** Resolves once nothing sent is waiting for its confirmation. */
    async settled(timeoutMs = 20_000): Promise<void> {
      await waitFor(() => inFlight.size === 0, timeoutMs, `every send to ${channel} confirmed (${inFlight.size} waiting)`);
    },
  };
}

/**
 * Consumes `queue` from `hosts` until every n in `confirmed` arrived (or `timeoutMs`), and
 * returns those that never did.
 */
async function lostOf(hosts: string[], queue: string, confirmed: Set<number>, timeoutMs = 20_000): Promise<number[]> {
  const consumer = await client(hosts);
  const received = new Set<number>();
  await consumer.consume(`${queue}/*`, (error, message, done) => {
    if (error) return;
    received.add((message as { n: number }).n);
    done();
  }, { prefetch: 1000 }).ready;
  await waitFor(() => received.size >= confirmed.size && [...confirmed].every((n) => received.has(n)), timeoutMs, "every confirmed message delivered")
    .catch(() => {}); // the caller asserts on what is missing
  return [...confirmed].filter((n) => !received.has(n)).sort((a, b) => a - b);
}

/** Nothing the client gave up on, and every message confirmed to it delivered by `hosts` in the end. */
async function expectNoneLost(publisher: ReturnType<typeof sender>, hosts: string[], queue: string): Promise<void> {
  expect(publisher.failures).toEqual([]);
  expect(await lostOf(hosts, queue, publisher.confirmed)).toEqual([]);
}

/** Three brokers (b0 master) in sync, and a publisher to all three with `backlog` sends to `queue` confirmed by all. */
async function threeInSync(queue: string, backlog: number) {
  const procs = await brokersOf(3);
  await startAll(procs);
  await inSync(procs[0]!, ["b1", "b2"]);
  const publisher = sender(await client(procs.map((p) => p.host)), queue);
  await publisher.sendAll(0, backlog);
  await acknowledged(procs[0]!);
  return { procs: procs as [Proc, Proc, Proc], publisher };
}

// ── (a) the master killed while a slave catches up from its position ─────────────────────────

it("catch-up after kill -9: the master killed while a slave catches up from its position — etcd elects another, the slave resumes from it, nothing confirmed is lost", async () => {
  const endpoints = await etcd();
  const procs = await brokersOf(3, {}, { etcd: endpoints });
  const [b0, b1, late] = procs as [Proc, Proc, Proc];
  // b0 and b1 first, so that one of them is elected; the third reaches that one through a relay.
  await startAll([b0, b1]);
  const first = await masterAmong([b0, b1]);
  const next = first === b0 ? b1 : b0;
  const toFirst = await relayTo(first);
  late.peers = [toFirst.host(first.name), next.host];
  await late.start();
  await inSync(first, [next.name, late.name]);
  const queue = "resume/v1";
  const publisher = sender(await client(procs.map((p) => p.host)), queue);
  await publisher.sendAll(0, 3_000);
  await acknowledged(first);

  await late.kill();
  await publisher.sendAll(3_000, 9_000); // a backlog of 6,000, confirmed by the master and `next`
  // Back, it catches up from its position; only the first 100 kB of it reach it (the relay holds the rest).
  toFirst.holdAfter(100_000);
  await late.start();
  await waitFor(() => toFirst.held >= 1 && plansFor(first, late.name).length === 2, 10_000, "the catch-up from a position halfway");
  expect(plansFor(first, late.name)).toEqual([NO_POSITION, "position"]);
  const halfway = (await first.replica(late.name))!;
  expect(halfway.state).toBe("catching-up");
  await waitFor(async () => (await late.status()).cluster.upstream!.ackedIndex > 0, 5_000, "part of it stored");

  await first.kill();
  toFirst.holdAfter(null);
  toFirst.cut();
  // etcd elects `next`: the in-sync set recorded holds the master and `next` only.
  await waitFor(async () => (await next.statusOrNull())?.role === "master", 15_000, `${next.name} elected`);
  await inSync(next, [late.name]);
  expect(plansFor(next, late.name)).toEqual(["position"]);
  expect(late.output()).toMatch(/catching up from index \d+;\d+ entries to receive\n[^]*catching up from index \d+;\d+ entries to receive/);
  expect((await next.replica(late.name))?.catchUp).toBe("position");
  await publisher.sendAll(9_000, 10_000); // confirmed by `next` and `late`: it is in sync
  await publisher.settled();

  await first.start(); // the old master comes back as a slave, and resumes from its position too
  await inSync(next, [first.name, late.name]);
  expect(plansFor(next, first.name)).toEqual(["position"]);
  expect((await next.status()).cluster.log).toMatchObject({ positionCatchUps: 2, snapshotsSent: 0 });
  await acknowledged(next);
  expect([await next.stored(queue), await late.stored(queue), await first.stored(queue)]).toEqual([10_000, 10_000, 10_000]);

  expect(publisher.confirmed.size).toBe(10_000);
  await expectNoneLost(publisher, procs.map((p) => p.host), queue);
}, 60_000);

// ── (b) a slave ahead of the next master ───────────────────────────────────────────────────

it("catch-up after kill -9: a slave that got entries the next master never had goes back to where their logs part, and nothing confirmed is lost", async () => {
  const procs = await brokersOf(3, { cluster: { maxLagMs: 30_000 } }); // b1 stays in sync while its link is frozen
  const [b0, b1, b2] = procs as [Proc, Proc, Proc];
  const toB0 = await relayTo(b0);
  b1.peers = [toB0.host("b0"), b2.host]; // b1's stream from b0 goes through the relay
  await startAll(procs);
  await inSync(b0, ["b1", "b2"]);
  const queue = "ahead/v1";
  const publisher = sender(await client(procs.map((p) => p.host)), queue);
  await publisher.sendAll(0, 2_000);
  await acknowledged(b0);

  // b1 hears nothing more from b0, and is still in sync: the master waits for it.
  toB0.freeze();
  const b1Index = (await b1.status()).cluster.log.index;
  publisher.start(2_000, 2_500);
  await waitFor(async () => (await b2.status()).cluster.log.index >= b1Index + 500, 10_000, "b2 holds 500 entries more than b1");
  expect(publisher.confirmed.size).toBe(2_000); // none of them is confirmed: b1 does not hold them
  expect((await b1.status()).cluster.log.index).toBe(b1Index);

  await b0.kill();
  toB0.cut();
  b0.demote();
  await b1.promote(); // in sync with b0 when it died: no force needed
  await inSync(b1, ["b2"]);
  expect(plansFor(b1, "b2")).toEqual(["position"]);
  expect((await b1.replica("b2"))?.catchUp).toBe("position");
  const back = /went back to index (\d+): dropped (\d+) messages the master does not hold/.exec(b2.output());
  expect(back).not.toBeNull();
  expect(Number(back![1])).toBe(b1Index);
  expect(Number(back![2])).toBe(500);

  // The client sends the 500 again: b1 streams them (it held them from the client only) before it confirms them.
  await publisher.settled();
  expect(publisher.confirmed.size).toBe(2_500);
  await b0.start();
  await inSync(b1, ["b0", "b2"]);
  expect((await b1.status()).cluster.log).toMatchObject({ snapshotsSent: 0 });
  await acknowledged(b1);
  expect([await b1.stored(queue), await b2.stored(queue), await b0.stored(queue)]).toEqual([2_500, 2_500, 2_500]);

  await expectNoneLost(publisher, procs.map((p) => p.host), queue);
}, 30_000);

// ── (c) a position the master cannot serve ───────────────────────────────────────────────────

it("catch-up after kill -9: a slave whose data folder was replaced gets a snapshot, with the reason logged, and holds what the master holds", async () => {
  const queue = "wiped/v1";
  const { procs: [b0, b1, b2], publisher } = await threeInSync(queue, 3_000);

  // First a kill -9 with the folder kept: the slave resumes from its position.
  await b2.kill();
  await publisher.sendAll(3_000, 3_500); // b0 and b1 confirm
  await b2.start();
  await inSync(b0, ["b1", "b2"]);
  expect(plansFor(b0, "b2")).toEqual([NO_POSITION, "position"]); // its first start had no store either
  expect((await b0.replica("b2"))?.catchUp).toBe("position");

  // Then a kill -9 and a new, empty data folder: no store, no position.
  await b2.kill();
  rmSync(join(b2.dir, "data"), { recursive: true, force: true });
  await publisher.sendAll(3_500, 4_000);
  await b2.start();
  await inSync(b0, ["b1", "b2"]);
  expect(plansFor(b0, "b2")).toEqual([NO_POSITION, "position", NO_POSITION]);
  expect((await b0.replica("b2"))?.catchUp).toBe("snapshot");
  expect((await b0.status()).cluster.log).toMatchObject({ positionCatchUps: 1, snapshotsSent: 3 }); // b1's and b2's first starts, and this one
  await acknowledged(b0);
  expect(await b0.stored(queue)).toBe(4_000);
  expect(await b2.stored(queue)).toBe(4_000);

  await expectNoneLost(publisher, [b0.host, b1.host, b2.host], queue);
}, 30_000);

it("catch-up after kill -9: a slave killed before its master restarted is older than the log that master kept, and gets a snapshot saying so", async () => {
  const queue = "tail/v1";
  const { procs: [b0, b1, b2], publisher } = await threeInSync(queue, 2_000);

  await b1.kill(); // its saved position is at index 2,000 at most
  await publisher.sendAll(2_000, 3_000); // b0 and b2 confirm
  await acknowledged(b0);
  const index = (await b0.status()).cluster.log.index;
  // A restart keeps none of the log's entries, only the position saved on the way out (here all of it).
  await b0.stop();
  await b0.start();
  await inSync(b0, ["b2"]);
  expect((await b0.status()).cluster.log).toMatchObject({ index, retainedFrom: index + 1, retainedBytes: 0 });
  expect(plansFor(b0, "b2").at(-1)).toBe("position");

  await b1.start();
  await inSync(b0, ["b1", "b2"]);
  expect(plansFor(b0, "b1").at(-1)).toMatch(
    new RegExp(`^snapshot: this master keeps the log after index ${index} only, and the slave is at index \\d+$`),
  );
  expect((await b0.replica("b1"))?.catchUp).toBe("snapshot");
  expect(b1.output()).toMatch(/catching up from index \d+\n/); // it did send a position: the master could not serve it

  await publisher.sendAll(3_000, 3_200); // confirmed by all three again
  await acknowledged(b0);
  expect([await b0.stored(queue), await b1.stored(queue), await b2.stored(queue)]).toEqual([3_200, 3_200, 3_200]);
  await expectNoneLost(publisher, [b0.host, b1.host, b2.host], queue);
}, 30_000);

// ── (d) a snapshot cut short by the kill of the slave receiving it ───────────────────────────

it("catch-up after kill -9: a slave killed halfway through its snapshot completes its catch-up after a restart, and holds each message once", async () => {
  const procs = await brokersOf(3, { memoryBudgetBytes: 65_536 }); // the master reads most of the snapshot from its store
  const [b0, b1, b2] = procs as [Proc, Proc, Proc];
  const toB0 = await relayTo(b0);
  b1.peers = [toB0.host("b0"), b2.host];
  await startAll([b0, b2]);
  await inSync(b0, ["b2"]);
  const queue = "cut/v1";
  const publisher = sender(await client([b0.host, b2.host]), queue);
  await publisher.sendAll(0, 20_000);

  // b1 is new: a snapshot of 20,000 messages, of which only the first 500 kB reach it.
  toB0.holdAfter(500_000);
  await b1.start();
  await waitFor(() => toB0.held >= 1, 10_000, "the snapshot halfway");
  await waitFor(async () => (await b1.status()).cluster.upstream!.snapshotReceived > 1_000, 10_000, "part of the snapshot received");
  const upstream = (await b1.status()).cluster.upstream!;
  expect(upstream).toMatchObject({ state: "catching-up", catchUp: null }); // no SYNCED yet
  expect(upstream.snapshotReceived).toBeLessThan(20_000);
  await b1.kill();
  await waitFor(async () => (await b0.replica("b1")) === undefined, 5_000, "b1's link closed on b0");

  toB0.holdAfter(null);
  await b1.start(); // its store holds part of the snapshot, and no position
  await inSync(b0, ["b1", "b2"], 30_000);
  expect(plansFor(b0, "b1")).toEqual([NO_POSITION, NO_POSITION]);
  expect((await b0.status()).cluster.log.snapshotsSent).toBe(3); // b2's first start, and b1's two
  await publisher.sendAll(20_000, 20_100); // confirmed by all three
  await acknowledged(b0);
  expect([await b0.stored(queue), await b1.stored(queue), await b2.stored(queue)]).toEqual([20_100, 20_100, 20_100]);

  await expectNoneLost(publisher, [b0.host, b1.host], queue);
}, 60_000);

// ── a master restarted after kill -9 ───────────────────────────────────────────────────────

// A master saves its replication position about once a second; restarted after kill -9 it knows
// only that its log went on past that index. Its in-sync slave is ahead of it: told to go back
// there, it would drop messages of entries after it that were confirmed. The restarted master goes
// on in a new epoch and sends that slave a snapshot, and a resend of a message it holds waits for
// the in-sync set; promoted, the slave holds every confirmed message.
it("catch-up after kill -9: a master killed -9 mid-stream and restarted leaves its in-sync slave holding every message it confirmed", async () => {
  const procs = await brokersOf(2);
  const [b0, b1] = procs as [Proc, Proc];
  await startAll(procs);
  await inSync(b0, ["b1"]);
  const queue = "restart/v1";
  const publisher = sender(await client(procs.map((p) => p.host)), queue);
  // 200 sends at a time, each batch once the last is confirmed: confirmations go on until the kill.
  let sending = true;
  const stream = (async () => {
    for (let n = 0; sending; n += 200) await publisher.sendAll(n, n + 200);
  })();
  await waitFor(() => publisher.confirmed.size >= 2_000, 10_000, "2,000 confirmed");
  await b0.kill(); // mid-stream: its position was saved up to a second ago
  sending = false;
  await b0.start(); // master again, as its config says
  await inSync(b0, ["b1"]);
  await stream; // the batch cut off by the kill is sent again and confirmed
  await publisher.settled();
  await acknowledged(b0);
  const total = publisher.confirmed.size;
  const held = { b0: await b0.stored(queue), b1: await b1.stored(queue) };
  expect(b0.output()).toContain("the last run did not stop cleanly");
  expect(b0.output()).toContain("because this master restarted after a run that did not stop cleanly");

  // b0 is gone for good: the operator promotes its in-sync slave.
  await b0.kill();
  await b1.promote();
  expect(await lostOf([b1.host], queue, publisher.confirmed, 5_000)).toEqual([]);
  expect(held).toEqual({ b0: total, b1: total });
}, 30_000);
