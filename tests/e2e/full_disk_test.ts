/**
 * A broker whose dataDirectory is on a small tmpfs that fills up: 2 MiB (too small for the
 * store's reserve), or 8 MiB half taken by a filler file (room for the reserve, which is what
 * lets a disk the store filled itself serve again once its consumers drained it). CI runs as root
 * and mounts it; without the privilege to mount, these tests fail (they do not skip): the
 * behaviour they pin needs a real full disk.
 */
import { afterEach, expect, it } from "bun:test";
import { spawnSync } from "node:child_process";
import { closeSync, existsSync, openSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { Client } from "../../mod.ts";
import { parseConfig } from "../../src/server/config/config.ts";
import { memoryLogger } from "../../src/server/log.ts";
import { type BrokerServer, startBroker } from "../../src/server/server.ts";
import { JOURNAL_LIVE_BYTES } from "../../src/server/store/journal.ts";
import { SqliteStore, WAL_SIZE_LIMIT } from "../../src/server/store/sqlite_store.ts";
import { RESERVE_BYTES, RESERVE_FILE } from "../../src/server/store/space.ts";
import { STORE_FILE } from "../../src/server/store/record.ts";
import { Logger } from "../../src/server/log.ts";
import { clientOptions, recorder, type Received, rejection, waitFor } from "../helpers/broker.ts";
import { TempDirs } from "../helpers/temp_dir.ts";

const dirs = new TempDirs("kitten-full-disk-");
const undo: (() => unknown)[] = [];
afterEach(async () => {
  for (const step of undo.splice(0).reverse()) {
    try {
      await step();
    } catch { /* best effort: the next steps still run */ }
  }
  dirs.removeAll();
});

/** A fresh tmpfs of `size` (2 MiB by default), unmounted after the test. */
function smallDisk(size = "2m"): string {
  const dir = dirs.make();
  const mounted = spawnSync("mount", ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir], { encoding: "utf8" });
  if (mounted.status !== 0) {
    throw new Error(`Cannot mount a ${size} tmpfs on ${dir} (these tests need root, as in CI): ${mounted.stderr.trim()}`);
  }
  undo.push(() => spawnSync("umount", ["-l", dir]));
  return dir;
}

/** Writes `path` until the disk is full (or `limit` bytes). */
function fill(path: string, limit = Infinity): void {
  const fd = openSync(path, "w");
  const chunk = new Uint8Array(4096);
  try {
    for (let written = 0; written < limit; written += chunk.length) writeSync(fd, chunk);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOSPC") throw error;
  } finally {
    closeSync(fd);
  }
}

function start(disk: string): { server: BrokerServer; logger: ReturnType<typeof memoryLogger>; host: string } {
  const config = parseConfig({
    socketServer: { port: 0, host: "127.0.0.1" },
    isManagementInterface: false,
    durability: "fsync",
    // The store's own handling of a full disk is tested here, not the floor that refuses sends
    // before it (minFreeDiskBytes, tested in tests/e2e/paging_test.ts).
    minFreeDiskBytes: 0,
    dataDirectory: join(disk, "data"),
    registeredClientsPath: join(dirs.make(), "clients"),
  });
  const logger = memoryLogger();
  const server = startBroker(config, { logger });
  undo.push(() => server.stop());
  return { server, logger, host: `127.0.0.1:${server.port}@broker-1` };
}

async function client(host: string): Promise<Client> {
  const mq = new Client();
  undo.push(() => mq.disconnect());
  await mq.connect(clientOptions({ host }, { maxPendingMessages: 10_000 }));
  return mq;
}

const BODY = "x".repeat(8000);
const SMALL = "x".repeat(2048);

/** Sends SMALL to `channel`, 16 at a time, until one is refused; returns how many were confirmed. */
async function fillWith(mq: Client, channel: string): Promise<number> {
  let confirmed = 0;
  const refused: { code?: string }[] = [];
  while (refused.length === 0) {
    await Promise.all(Array.from({ length: 16 }, () => mq.send(channel, SMALL).then(() => confirmed++, (error) => refused.push(error))));
  }
  expect(refused[0]!.code).toBe("STORE_UNAVAILABLE");
  return confirmed;
}

/** Bytes of a file of the data directory (0 when it is not there). */
function sizeOf(disk: string, name: string): number {
  const path = join(disk, "data", name);
  return existsSync(path) ? statSync(path).size : 0;
}

it("e2e: full disk: sends are refused while the disk is full and succeed again within seconds once space is freed", async () => {
  const disk = smallDisk();
  fill(join(disk, "filler"), 1024 * 1024);
  const { host } = start(disk);
  const mq = await client(host);
  let refused = null;
  for (let i = 0; i < 1000 && refused === null; i++) {
    refused = await mq.send("disk/v1/1", BODY).then(() => null, (error) => error);
  }
  expect(refused?.code).toBe("STORE_UNAVAILABLE");
  rmSync(join(disk, "filler"));
  await waitFor(() => mq.send("disk/v1/1", BODY).then(() => true, () => false), 5000, "a send confirmed again");
  // And it stays writable: with a consumer acking, 2.4 MB more go through the 2 MiB disk, as the
  // WAL is checkpointed instead of growing back into the freed space.
  const got: Received[] = [];
  await mq.consume("disk/v1/1", recorder(got)).ready;
  for (let i = 0; i < 300; i++) await mq.send("disk/v1/1", BODY);
  await waitFor(() => got.length >= 300, 5000, "every message delivered");
});

it("e2e: full disk: a broker starts on a full disk with its data, delivers and takes acks, and refuses only new sends until space returns", async () => {
  const disk = smallDisk();
  const first = start(disk);
  const producer = await client(first.host);
  for (let i = 0; i < 20; i++) await producer.send("disk/v1/1", { n: i, pad: BODY });
  await producer.disconnect();
  fill(join(disk, "filler")); // every byte left
  await first.server.stop();

  const { host, logger, server } = start(disk); // must not throw SQLITE_FULL
  expect(logger.lines.some((line) => line.includes("disk full at open"))).toBe(true);
  const mq = await client(host);
  expect((await rejection(mq.send("disk/v1/1", { n: "new" }))).code).toBe("STORE_UNAVAILABLE");
  const got: Received[] = [];
  await mq.consume("disk/v1/1", recorder(got)).ready; // acks each delivery
  await waitFor(() => got.length === 20, 5000, "the 20 stored messages delivered");
  expect(got.map((r) => (r.message as { n: number }).n)).toEqual([...Array(20).keys()]);
  await waitFor(() => server.broker.inflight() === 0, 5000, "every delivery acked");

  rmSync(join(disk, "filler"));
  await waitFor(() => mq.send("disk/v1/2", { n: "after" }).then(() => true, () => false), 5000, "a send confirmed again");
  // The acks taken while the disk was full reach the disk too: nothing is delivered again after a restart.
  const store = server.broker.store as SqliteStore;
  await waitFor(() => store.pending === 0 && store.healthy, 5000, "acks written");
  await mq.disconnect();
  await server.stop();
  const reopened = new SqliteStore({ directory: join(disk, "data"), logger: new Logger(99) });
  undo.push(() => reopened.close());
  expect(reopened.load().map((m) => m.destination)).toEqual(["2"]);
});

it("SqliteStore keeps its WAL near WAL_SIZE_LIMIT through many commits (checkpoints)", async () => {
  const directory = join(dirs.make(), "data");
  const store = new SqliteStore({ directory, mode: "fsync", logger: new Logger(99) });
  undo.push(() => store.close());
  let largest = 0;
  for (let batch = 0; batch < 100; batch++) {
    const appends = [];
    for (let i = 0; i < 20; i++) {
      appends.push(store.append({ id: `w.${batch}.${i}`, queue: "wal/v1", destination: "1", body: new Uint8Array(8000), created: 0 }));
    }
    await Promise.all(appends);
    largest = Math.max(largest, statSync(join(directory, "kitten-mq.db-wal")).size);
  }
  // 16 MB went through the WAL; it never held much more than the limit plus one transaction: a
  // batch (160 KB) with the journal's messages settled into the database (JOURNAL_LIVE_BYTES).
  expect(largest).toBeGreaterThan(0);
  expect(largest).toBeLessThan(WAL_SIZE_LIMIT + JOURNAL_LIVE_BYTES + 512 * 1024);
});

it("e2e: full disk: a disk its own backlog filled takes sends again within 10 s once consumers drained it, with no restart, and the store shrinks", async () => {
  const disk = smallDisk("8m");
  fill(join(disk, "filler"), 4 * 1024 * 1024); // never removed: the only space freed is the drained queue's
  const { host } = start(disk);
  expect(sizeOf(disk, RESERVE_FILE)).toBe(RESERVE_BYTES);
  const mq = await client(host);
  for (let i = 0; i < 90; i++) await mq.send("disk/v1/kept", { n: i, pad: SMALL }); // 90 live messages stay
  const confirmed = await fillWith(mq, "disk/v1/1");
  const full = sizeOf(disk, STORE_FILE);
  expect(sizeOf(disk, RESERVE_FILE)).toBe(0); // emptied by the full disk, for the acks' deletes
  expect((await rejection(mq.send("disk/v1/1", SMALL))).code).toBe("STORE_UNAVAILABLE");

  const got: Received[] = [];
  await mq.consume("disk/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === confirmed, 10_000, "the backlog drained");
  await waitFor(() => mq.send("disk/v1/1", SMALL).then(() => true, () => false), 10_000, "a send confirmed again");
  expect(sizeOf(disk, RESERVE_FILE)).toBe(RESERVE_BYTES);
  expect(sizeOf(disk, STORE_FILE)).toBeLessThan(full / 2); // the drained pages went back to the disk
  // It stays writable (sends and acks, one at a time), and the 90 kept messages are all there.
  for (let i = 0; i < 500; i++) await mq.send("disk/v1/1", SMALL);
  await waitFor(() => got.length === confirmed + 501, 5000, "every later message delivered");
  const kept: Received[] = [];
  await mq.consume("disk/v1/kept", recorder(kept)).ready;
  await waitFor(() => kept.length === 90, 5000, "the 90 kept messages delivered");
  expect(kept.map((r) => (r.message as { n: number }).n)).toEqual([...Array(90).keys()]);
});

it("e2e: full disk: a broker restarted on a full disk starts, delivers what it holds, and confirms again within 10 s of space being freed", async () => {
  const disk = smallDisk("8m");
  fill(join(disk, "filler"), 4 * 1024 * 1024);
  const first = start(disk);
  const producer = await client(first.host);
  const confirmed = await fillWith(producer, "disk/v1/1");
  await producer.disconnect();
  await first.server.stop();
  fill(join(disk, "filler-2")); // every byte the stop gave back (the WAL)

  const { host, logger, server } = start(disk); // must not throw SQLITE_FULL
  expect(logger.lines.some((line) => line.includes("disk full at open"))).toBe(true);
  const mq = await client(host);
  expect((await rejection(mq.send("disk/v1/1", SMALL))).code).toBe("STORE_UNAVAILABLE");
  const got: Received[] = [];
  await mq.consume("disk/v1/1", recorder(got)).ready;
  await waitFor(() => got.length === confirmed, 10_000, "every stored message delivered");
  await waitFor(() => server.broker.inflight() === 0, 5000, "every delivery acked");
  expect((await rejection(mq.send("disk/v1/1", SMALL))).code).toBe("STORE_UNAVAILABLE");

  rmSync(join(disk, "filler-2"));
  await waitFor(() => mq.send("disk/v1/2", { n: "after" }).then(() => true, () => false), 10_000, "a send confirmed again");
  // The acks taken while the disk was full reach the disk, and the space they freed goes back.
  const store = server.broker.store as SqliteStore;
  await waitFor(() => store.pending === 0 && store.healthy, 5000, "acks written");
  await mq.disconnect();
  await server.stop();
  expect(sizeOf(disk, RESERVE_FILE)).toBe(RESERVE_BYTES);
  expect(sizeOf(disk, STORE_FILE)).toBeLessThan(256 * 1024);
  const reopened = new SqliteStore({ directory: join(disk, "data"), logger: new Logger(99) });
  undo.push(() => reopened.close());
  expect(reopened.load().map((m) => m.destination)).toEqual(["2"]);
});
