/**
 * Catching up from a position: where two logs part (history.ts), what the master sends for it
 * (Replication.attach), what a slave undoes (LogPositions.resume), and the same checked against
 * random histories of masters killed, slaves elected and brokers rejoining.
 */
import { describe, expect, it } from "bun:test";
import { decode, encode, frame, FRAME_HEADER_SIZE, OP } from "../../../src/protocol/mod.ts";
import { commonPrefix, EpochHistory } from "../../../src/server/cluster/history.ts";
import { LogPositions } from "../../../src/server/cluster/log_positions.ts";
import { LogTail } from "../../../src/server/cluster/log_tail.ts";
import { Replication } from "../../../src/server/cluster/replication.ts";
import type { ReplicaLink } from "../../../src/server/cluster/replica.ts";
import { Message } from "../../../src/server/queue/message.ts";
import { MemoryStore } from "../../../src/server/store/memory_store.ts";

class FakeLink implements ReplicaLink {
  frames: unknown[][] = [];
  backlogBytes = 0;
  constructor(readonly peerId: string) {}
  pushFramed(bytes: Uint8Array): void {
    this.frames.push(decode(bytes.subarray(FRAME_HEADER_SIZE)) as unknown[]);
  }
  fail(): void {}
}

function master(history: EpochHistory, tail: LogTail, logs: string[] = []) {
  return new Replication({
    minInSyncReplicas: () => 1,
    maxLagMs: () => 1_000,
    epoch: () => history.lastEpoch,
    now: () => 0,
    log: (_level, message) => logs.push(message),
    self: () => "master",
    history,
    tail,
    keepsLog: () => true,
  });
}

const message = (id: string) => new Message(id, "q/v1", "x", new Uint8Array([1]), 0, 0);
const noSnapshot = () => ({ count: 0, entries: [][Symbol.iterator]() });

describe("catch-up from a position", () => {
  it("commonPrefix: logs agree up to the end of the newest epoch both hold", () => {
    const master = new EpochHistory([[1, 1], [3, 11], [5, 21]]);
    expect(commonPrefix(master, 30, [[1, 1], [3, 11]], 15)).toBe(15); // behind, same history: nothing to undo
    expect(commonPrefix(master, 30, [[1, 1], [3, 11]], 25)).toBe(20); // epoch 3 ended at 20 on the master
    expect(commonPrefix(master, 30, [[1, 1], [4, 11]], 18)).toBe(10); // epoch 4 never reached the master
    expect(commonPrefix(master, 30, [[2, 1]], 5)).toBeNull(); // no epoch in common
    expect(commonPrefix(master, 30, [[1, 1], [3, 11], [5, 21]], 40)).toBe(30); // ahead in the same epoch
  });

  it("a slave behind the master in the same history gets RESUME and only the entries it lacks", () => {
    const history = new EpochHistory();
    const replication = master(history, new LogTail(0));
    replication.begin(7, 0);
    for (let i = 1; i <= 10; i++) replication.append(message(`m${i}`));
    const link = new FakeLink("s1");
    replication.attach(link, { history: [[7, 1]], index: 6, floor: 6 }, noSnapshot);
    expect(link.frames[0]).toEqual([OP.RESUME, 6, { from: 6, to: 10, history: [[7, 1]] }]);
    expect(link.frames.slice(1).map((frame) => [frame[0], frame[1], frame[2]])).toEqual(
      [7, 8, 9, 10].map((index) => [OP.APPEND, index, `m${index}`]),
    );
    expect(replication.positionCatchUps).toBe(1);
    expect(replication.snapshotsSent).toBe(0);
    // It is in sync once it acknowledged the last entry of its catch-up.
    replication.ack(link, 10);
    expect(replication.inSyncMembers()).toEqual(["master", "s1"]);
  });

  it("a slave in sync with the old master is in sync with the new one at once: nothing is transferred", () => {
    const history = new EpochHistory([[7, 1]]);
    const replication = master(history, new LogTail(10)); // the new master held entries up to 10
    replication.begin(9, 10);
    const link = new FakeLink("s2");
    replication.attach(link, { history: [[7, 1]], index: 10, floor: 10 }, noSnapshot);
    expect(link.frames).toEqual([[OP.RESUME, 10, { from: 10, to: 10, history: [[7, 1], [9, 11]] }]]);
    replication.ack(link, 10);
    expect(replication.inSyncMembers()).toEqual(["master", "s2"]);
  });

  it("a slave ahead of a new master goes back to where their logs part and drops what it appended after", () => {
    // The slave received entries 1…13 of epoch 7; the new master only 1…10, then led epoch 9.
    const slave = new LogPositions(null, () => {});
    slave.history.adopt([[7, 1]]);
    for (let i = 1; i <= 13; i++) slave.tail.push(i, frame(encode(i % 2 === 0 ? [OP.REMOVE, i, []] : [OP.APPEND, i, `m${i}`])));
    const position = slave.position()!;
    expect(position).toEqual({ history: [[7, 1]], index: 13, floor: 0 });

    const history = new EpochHistory([[7, 1]]);
    const tail = new LogTail(0);
    const replication = master(history, tail);
    for (let i = 1; i <= 10; i++) replication.append(message(`m${i}`));
    replication.begin(9, 10);
    replication.append(message("n11"));
    const link = new FakeLink("s1");
    replication.attach(link, position, noSnapshot);
    const [resume] = link.frames;
    expect(resume).toEqual([OP.RESUME, 10, { from: 10, to: 11, history: [[7, 1], [9, 11]] }]);
    // The slave undoes entries 11…13: the messages they appended (11 and 13) go.
    expect(slave.resume(10, [[7, 1], [9, 11]])).toEqual(["m11", "m13"]);
    expect(slave.tail.last).toBe(10);
    expect(slave.history.epochs).toEqual([[7, 1], [9, 11]]);
  });

  it("a slave whose position the master never had, or no longer keeps, gets a snapshot and the log says why", () => {
    const logs: string[] = [];
    const history = new EpochHistory([[7, 1]]);
    const tail = new LogTail(0, 64); // keeps about 8 entries of 8 bytes
    const replication = master(history, tail, logs);
    for (let i = 1; i <= 40; i++) replication.append(message(`m${i}`));
    const stranger = new FakeLink("s1");
    replication.attach(stranger, { history: [[99, 1]], index: 5, floor: 5 }, noSnapshot);
    expect(stranger.frames.at(-1)![0]).toBe(OP.SYNCED);
    expect(logs.at(-1)).toContain("because its history (epochs 99) shares no epoch with this master's");

    const late = new FakeLink("s2");
    replication.attach(late, { history: [[7, 1]], index: 3, floor: 3 }, noSnapshot);
    expect(late.frames.at(-1)![0]).toBe(OP.SYNCED);
    expect(logs.at(-1)).toContain(`because this master keeps the log after index ${tail.base} only, and the slave is at index 3`);

    const restarted = new FakeLink("s3"); // ahead of the master after a restart: it cannot go back
    replication.attach(restarted, { history: [[7, 1]], index: 45, floor: 45 }, noSnapshot);
    expect(restarted.frames.at(-1)![0]).toBe(OP.SYNCED);
    expect(logs.at(-1)).toContain("can go back to index 45 only");
    expect(replication.snapshotsSent).toBe(3);
  });

  it("the tail's bytes after an index equal the sum of the frames kept after it, through drops, truncations and gaps", () => {
    const tail = new LogTail(0, 200);
    const sumAfter = (index: number) => {
      let bytes = 0;
      for (let i = tail.base + 1; i <= tail.last; i++) if (i > index) bytes += tail.framesAfter(i - 1)[0]!.length;
      return bytes;
    };
    for (let step = 0; step < 300; step++) {
      const roll = (step * 7919) % 23;
      const bytes = new Uint8Array(1 + (step % 17));
      if (roll === 0) tail.truncate(Math.max(tail.base, tail.last - 3));
      else if (roll === 1) tail.push(tail.last + 5, bytes); // a gap: the tail starts again after it
      else tail.push(tail.last + 1, bytes);
      for (const probe of [tail.base - 2, tail.base, tail.base + 1, Math.floor((tail.base + tail.last) / 2), tail.last, tail.last + 3]) {
        expect(tail.bytesAfter(probe)).toBe(sumAfter(probe));
      }
      expect(tail.bytesAfter(tail.base)).toBe(tail.bytes);
    }
  });

  it("a position saved in the store comes back after a restart, and a snapshot not yet stored claims none", () => {
    const store = new MemoryStore();
    const before = new LogPositions(store, () => {});
    before.history.adopt([[3, 1], [8, 40]]);
    before.save(52);
    const after = new LogPositions(store, () => {});
    expect(after.position()).toEqual({ history: [[3, 1], [8, 40]], index: 52, floor: 52 });
    after.restart(60, [[3, 1], [8, 40]]);
    expect(new LogPositions(store, () => {}).position()).toBeUndefined();
  });

  it("saveSoon() writes the index with the store's next commit, and a history that changed at once", () => {
    const writes: string[] = [];
    const store = new (class extends MemoryStore {
      override setMeta(key: string, value: string | number): void {
        writes.push(`now ${key}=${value}`);
        super.setMeta(key, value);
      }
      override setMetaWithNextCommit(key: string, value: string | number): void {
        writes.push(`next commit ${key}=${value}`);
        super.setMetaWithNextCommit(key, value);
      }
    })();
    const positions = new LogPositions(store, () => {});
    positions.history.adopt([[2, 1]]);
    positions.save(10);
    writes.length = 0;
    positions.saveSoon(20, 5_000);
    positions.saveSoon(25, 5_500); // less than a second later: not written
    expect(writes).toEqual(["next commit logIndex=20"]);
    positions.history.begin(3, 26);
    positions.saveSoon(30, 6_100);
    expect(writes).toEqual(["next commit logIndex=20", 'now logHistory=[[2,1],[3,26]]', "now logIndex=30"]);
    expect(new LogPositions(store, () => {}).position()).toEqual({ history: [[2, 1], [3, 26]], index: 30, floor: 30 });
  });
});

// ── random histories ─────────────────────────────────────────────────────────────────────────

type Entry = { epoch: number; index: number; op: "append" | "remove"; id: string };

/** A broker of the model: its log (entries 1…n), its epoch table and the tail it keeps in memory. */
class ModelBroker {
  log: Entry[] = [];
  positions = new LogPositions(null, () => {});
  constructor(readonly name: string) {}
  get last(): number {
    return this.log.length;
  }
  add(entry: Entry): void {
    this.log.push(entry);
    const bytes = frame(encode([entry.op === "append" ? OP.APPEND : OP.REMOVE, entry.index, entry.id]));
    this.positions.tail.push(entry.index, bytes);
  }
  /** kill -9 and restart: the log on disk stays, the tail in memory is gone. */
  restart(): void {
    const history = this.positions.history.epochs;
    this.positions = new LogPositions(null, () => {});
    this.positions.history.adopt(history);
    this.positions.storedIndex = this.last;
    this.positions.tail.reset(this.last);
  }
  messages(): Set<string> {
    const held = new Set<string>();
    for (const entry of this.log) entry.op === "append" ? held.add(entry.id) : held.delete(entry.id);
    return held;
  }
}

function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

describe("catch-up against random histories", () => {
  it("after every catch-up the slave's log and messages equal the master's (200 histories)", () => {
    let resumes = 0;
    let snapshots = 0;
    for (let seed = 1; seed <= 200; seed++) {
      const rand = random(seed);
      const brokers = [new ModelBroker("a"), new ModelBroker("b"), new ModelBroker("c")];
      let leader = brokers[0]!;
      let epoch = 1;
      leader.positions.history.begin(epoch, 1);
      let nextId = 0;
      const live: string[] = [];
      const replication = () => master(leader.positions.history, leader.positions.tail);

      for (let step = 0; step < 40; step++) {
        // The leader writes a few entries; each slave receives a prefix of them.
        const count = 1 + Math.floor(rand() * 6);
        for (let i = 0; i < count; i++) {
          const remove = live.length > 0 && rand() < 0.3;
          const id = remove ? live.splice(Math.floor(rand() * live.length), 1)[0]! : `m${nextId++}`;
          if (!remove) live.push(id);
          leader.add({ epoch, index: leader.last + 1, op: remove ? "remove" : "append", id });
        }
        for (const slave of brokers) {
          if (slave === leader || rand() < 0.3) continue;
          catchUp(slave, leader, replication(), rand() < 0.5 ? leader.last : leader.last - Math.floor(rand() * count));
        }
        if (rand() < 0.25) {
          // The leader dies; another broker leads the next epoch from the last index it holds.
          const candidates = brokers.filter((b) => b !== leader);
          const old = leader;
          leader = candidates[Math.floor(rand() * candidates.length)]!;
          epoch += 1 + Math.floor(rand() * 3);
          leader.positions.history.begin(epoch, leader.last + 1);
          if (rand() < 0.5) old.restart();
          live.splice(0, live.length, ...leader.messages());
        }
      }
      for (const slave of brokers) {
        if (slave === leader) continue;
        const kind = catchUp(slave, leader, replication(), leader.last);
        kind === "position" ? resumes++ : snapshots++;
        expect(slave.log).toEqual(leader.log);
        expect(slave.messages()).toEqual(leader.messages());
      }
    }
    // Most catch-ups go from a position; snapshots only where a restarted broker had gone further.
    expect(resumes).toBeGreaterThan(snapshots);
  });
});

/** One catch-up of `slave` from `leader` up to entry `upTo`, as the brokers run it. */
function catchUp(slave: ModelBroker, leader: ModelBroker, replication: Replication, upTo: number): "position" | "snapshot" {
  replication.begin(leader.positions.history.lastEpoch, leader.last);
  const link = new FakeLink(slave.name);
  replication.attach(link, slave.positions.position(), () => ({ count: 0, entries: [][Symbol.iterator]() }));
  const [first] = link.frames;
  if (first?.[0] === OP.RESUME) {
    const { from, history } = first[2] as { from: number; history: [number, number][] };
    const undone = slave.positions.resume(from, history);
    const appendedAfter = slave.log.slice(from).filter((e) => e.op === "append").map((e) => e.id);
    expect(undone).toEqual(appendedAfter.slice(appendedAfter.length - undone.length)); // the tail's part of it
    slave.log.length = from;
    for (const entry of leader.log.slice(from, upTo)) slave.add(entry);
    return "position";
  }
  // A snapshot: the slave holds exactly what the leader holds at its end, and the log starts after it.
  slave.log = leader.log.slice(0, upTo);
  slave.positions.restart(upTo, leader.positions.history.epochs);
  slave.positions.stored(upTo);
  return "snapshot";
}
