/**
 * The master's side of replication, driven by hand: fake peer links, an injected clock. Which
 * replicas are in sync, when a send is confirmed, when it is refused, and that a shrunk in-sync
 * set is recorded before anything is confirmed without the replica that left.
 */
import { describe, expect, it } from "bun:test";
import { decode, FRAME_HEADER_SIZE, type KittenError, OP } from "../../../src/protocol/mod.ts";
import { Message } from "../../../src/server/queue/message.ts";
import { Replication, type ReplicationOptions } from "../../../src/server/cluster/replication.ts";
import type { ReplicaLink } from "../../../src/server/cluster/replica.ts";
import { EpochHistory } from "../../../src/server/cluster/history.ts";
import { LogTail } from "../../../src/server/cluster/log_tail.ts";
import { delaysInForce, REQUEUES_PER_FRAME } from "../../../src/server/cluster/requeue_notices.ts";
import { setup as queueSetup } from "../_queue_harness.ts";

class FakeLink implements ReplicaLink {
  frames: unknown[][] = [];
  failed: string | null = null;
  backlogBytes = 0;
  constructor(readonly peerId: string) {}
  pushFramed(bytes: Uint8Array): void {
    this.frames.push(decode(bytes.subarray(FRAME_HEADER_SIZE)) as unknown[]);
  }
  fail(_code: "REPLICA_TOO_SLOW", message: string): void {
    this.failed = message;
  }
  /** The op codes written so far. */
  get ops(): number[] {
    return this.frames.map((frame) => frame[0] as number);
  }
  lastSeq(): number {
    return Math.max(...this.frames.filter((f) => typeof f[1] === "number").map((f) => f[1] as number));
  }
}

function setup(minInSync: number, extra: Partial<ReplicationOptions> = {}) {
  let now = 1_000;
  const logs: string[] = [];
  const replication = new Replication({
    minInSyncReplicas: () => minInSync,
    maxLagMs: () => 1_000,
    epoch: () => 7,
    now: () => now,
    log: (_level, message) => logs.push(message),
    self: () => "master",
    history: new EpochHistory([[7, 1]]),
    tail: new LogTail(0),
    keepsLog: () => false,
    ...extra,
  });
  return { replication, logs, advance: (ms: number) => (now += ms) };
}

let seq = 0;
const snapshot = (messages: Message[]) => ({ count: messages.length, entries: messages[Symbol.iterator]() });
const message = (id: string) => new Message(id, "q/v1", "x", new Uint8Array([1, 2, 3]), 0, seq++);

/** How `promise` stands once the event loop takes its next turn: what settles it here is synchronous. */
async function settled(promise: Promise<void>): Promise<"confirmed" | string> {
  const result = await Promise.race([
    promise.then(() => "confirmed", (error: KittenError) => error.code),
    new Promise<string>((resolve) => setImmediate(() => resolve("pending"))),
  ]);
  return result;
}

describe("Replication", () => {
  it("Replication sends a snapshot, SYNCED, then live entries; a replica is in sync once it stored the snapshot", () => {
    const { replication } = setup(1);
    const link = new FakeLink("s1");
    replication.attach(link, undefined, () => snapshot([message("a"), message("b")]));
    expect(link.ops).toEqual([OP.APPEND, OP.APPEND, OP.SYNCED]);
    replication.append(message("c"));
    expect(link.ops.at(-1)).toBe(OP.APPEND);
    expect(replication.inSyncMembers()).toEqual(["master"]);

    replication.ack(link, link.frames[2]![1] as number); // the snapshot's index
    expect(replication.inSyncMembers()).toEqual(["master", "s1"]);
    expect(link.frames.at(-1)).toEqual([OP.IN_SYNC, { inSync: true, epoch: 7 }]);
  });

  it("Replication with minInSyncReplicas 2 refuses before storing while no replica is in sync", () => {
    const { replication } = setup(2);
    let refused: KittenError | null = null;
    try {
      replication.checkReplicas("q/v1/x");
    } catch (error) {
      refused = error as KittenError;
    }
    expect(refused?.code).toBe("NOT_ENOUGH_REPLICAS");
    expect(refused?.message).toBe(
      'Cannot send to "q/v1/x": 1 of the 2 brokers cluster.minInSyncReplicas asks for are in sync (no slave connected); nothing was stored, send again later',
    );
  });

  it("Replication confirms a send only once every in-sync replica acknowledged it", async () => {
    const { replication } = setup(2);
    const [one, two] = [new FakeLink("s1"), new FakeLink("s2")];
    for (const link of [one, two]) {
      replication.attach(link, undefined, () => snapshot([]));
      replication.ack(link, link.lastSeq());
    }
    expect(replication.inSyncCount()).toBe(2);
    replication.checkReplicas("q/v1/x");
    const index = replication.append(message("m"));
    const confirmed = replication.waitFor(index, "q/v1/x")!;
    expect(await settled(confirmed)).toBe("pending");
    replication.ack(one, index);
    expect(await settled(confirmed)).toBe("pending"); // s2 is in sync too: it must have it
    replication.ack(two, index);
    expect(await settled(confirmed)).toBe("confirmed");
  });

  it("Replication with minInSyncReplicas 1 never waits for replicas", () => {
    const { replication } = setup(1);
    const link = new FakeLink("s1");
    replication.attach(link, undefined, () => snapshot([]));
    replication.ack(link, link.lastSeq());
    expect(replication.waitFor(replication.append(message("m")), "q/v1/x")).toBeUndefined();
  });

  it("Replication takes a silent replica out of sync after maxLagMs; a send waiting only for it is then refused", async () => {
    const { replication, advance, logs } = setup(2);
    const link = new FakeLink("s1");
    replication.attach(link, undefined, () => snapshot([]));
    replication.ack(link, link.lastSeq());
    const waiting = replication.waitFor(replication.append(message("m")), "q/v1/x")!;
    advance(500);
    replication.tick();
    expect(replication.inSyncCount()).toBe(1);
    advance(600); // 1,100 ms without an acknowledgement
    replication.tick();
    expect(replication.inSyncCount()).toBe(0);
    expect(logs).toContain("peer=s1;acknowledged nothing for 1000 ms;out of sync");
    expect(link.frames.filter((frame) => frame[0] === OP.IN_SYNC).at(-1)).toEqual([OP.IN_SYNC, { inSync: false, epoch: 7 }]);
    expect(await settled(waiting)).toBe("NOT_ENOUGH_REPLICAS");
  });

  it("Replication: a lagging replica comes back in sync once it caught up", () => {
    const { replication, advance } = setup(2);
    const link = new FakeLink("s1");
    replication.attach(link, undefined, () => snapshot([]));
    replication.ack(link, link.lastSeq());
    const index = replication.append(message("m"));
    advance(1_500);
    replication.tick();
    expect(replication.status()[0]!.state).toBe("lagging");
    replication.ack(link, index);
    expect(replication.status()[0]!.state).toBe("in-sync");
  });

  it("Replication records a shrunk in-sync set before it confirms without the replica that left", async () => {
    let release: () => void = () => {};
    const recorded: string[][] = [];
    const { replication } = setup(2, {
      publishIsr: (members) => {
        recorded.push(members);
        return new Promise<void>((resolve) => (release = resolve));
      },
    });
    const [one, two] = [new FakeLink("s1"), new FakeLink("s2")];
    for (const link of [one, two]) {
      replication.attach(link, undefined, () => snapshot([]));
      replication.ack(link, link.lastSeq());
      release();
    }
    await Promise.resolve();
    const index = replication.append(message("m"));
    const confirmed = replication.waitFor(index, "q/v1/x")!;
    replication.ack(one, index);
    replication.detach(two); // s2 leaves: confirming without it must wait for the record
    expect(recorded.at(-1)).toEqual(["master", "s1"]);
    expect(await settled(confirmed)).toBe("pending");
    release();
    expect(await settled(confirmed)).toBe("confirmed");
  });

  it("Replication tells a replica it is in sync only once the in-sync set naming it is recorded (what an election reads)", async () => {
    let release: () => void = () => {};
    const { replication } = setup(2, {
      publishIsr: () => new Promise<void>((resolve) => (release = resolve)),
    });
    const link = new FakeLink("s1");
    replication.attach(link, undefined, () => snapshot([]));
    replication.ack(link, link.lastSeq());
    expect(replication.inSyncMembers()).toEqual(["master", "s1"]);
    expect(link.ops).not.toContain(OP.IN_SYNC); // the record is still being written
    release();
    await Promise.resolve();
    expect(link.frames.filter((frame) => frame[0] === OP.IN_SYNC)).toEqual([[OP.IN_SYNC, { inSync: true, epoch: 7 }]]);
  });

  it("Replication cuts off a replica with more than its bound of entries waiting", () => {
    const { replication } = setup(1, { maxQueuedBytes: 64 * 1024 });
    const link = new FakeLink("s1");
    link.backlogBytes = 1 << 30; // its socket takes nothing: every entry waits
    replication.attach(link, undefined, () => snapshot([]));
    const big = new Message("big", "q/v1", "x", new Uint8Array(10_000), 0, seq++);
    let appended = 0;
    for (; appended < 100 && link.failed === null; appended++) replication.append(big);
    expect(appended).toBe(7); // the seventh entry of ~10 KB passes 64 KiB
    expect(link.failed).toContain('Cannot keep replicating to "s1": ');
  });

  it("Replication counts requeue notices towards a replica's bound: a flood of nacks with a replica that reads nothing cuts it off", () => {
    const { replication } = setup(1, { maxQueuedBytes: 64 * 1024 });
    const link = new FakeLink("s1");
    link.backlogBytes = 1 << 30; // its socket takes nothing: every frame waits
    replication.attach(link, undefined, () => snapshot([]));
    let frames = 0;
    for (; frames < 100 && link.failed === null; frames++) {
      for (let i = 0; i < REQUEUES_PER_FRAME; i++) replication.requeued(`a-rather-long-message-id.${frames}-${i}`, 1, 0);
    }
    expect(frames).toBeLessThan(100); // about 35 KB a frame: cut off after a couple of frames, not left to grow
    expect(link.failed).toContain('Cannot keep replicating to "s1": ');
  });

  it("Replication batches the removals of one tick in one REMOVE entry", () => {
    const { replication } = setup(1);
    const link = new FakeLink("s1");
    replication.attach(link, undefined, () => snapshot([]));
    replication.remove("a");
    replication.remove("b");
    replication.tick();
    const removes = link.frames.filter((frame) => frame[0] === OP.REMOVE);
    expect(removes.map((frame) => frame[2])).toEqual([["a", "b"]]);
  });

  it("Replication tells its replicas of requeues (delivery count, ms left) after the entries queued before them, with no log index", () => {
    const { replication, advance } = setup(2);
    const link = new FakeLink("s1");
    replication.attach(link, undefined, () => snapshot([]));
    replication.ack(link, link.lastSeq());
    link.backlogBytes = 1 << 30; // its socket takes nothing for now: what follows waits, in order
    const index = replication.append(message("m"));
    replication.requeued("m", 1, 1_000 + 5_000); // nacked with a delay
    replication.requeued("n", 3, 1_000 + 250.4);
    replication.requeued("o", 2, 0); // nacked at once, or its ack deadline passed
    advance(100); // the burst ends a little later
    replication.flush();
    const stream = () => link.frames.filter((frame) => frame[0] === OP.APPEND || frame[0] === OP.REQUEUED);
    expect(stream()).toEqual([]);

    link.backlogBytes = 0;
    replication.drained(link);
    expect(stream().map((frame) => frame[0])).toEqual([OP.APPEND, OP.REQUEUED]);
    expect(stream()[1]).toEqual([OP.REQUEUED, ["m", 1, 4_900, "n", 3, 151, "o", 2, 0]]);
    expect(replication.index).toBe(index); // not a log entry
    replication.ack(link, index);
    expect(replication.status()[0]).toMatchObject({ lagEntries: 0, lagMs: 0 });
  });

  it("Replication notes no requeue while no replica is attached; one that attaches is told the delays in force after its catch-up", () => {
    const t = queueSetup();
    const consumer = t.consumer("a", ["x"], 10);
    t.send("x");
    t.send("x");
    t.nackOldest(consumer, 30);
    t.nackOldest(consumer, 2);
    const { replication } = setup(1, { now: () => t.now, delaysInForce: () => delaysInForce([t.queue], t.now) });
    replication.requeued("m0", 1, t.now + 30_000); // nobody to tell
    replication.flush();

    const link = new FakeLink("s1");
    replication.attach(link, undefined, () => snapshot([message("held")]));
    expect(link.ops).toEqual([OP.APPEND, OP.SYNCED, OP.REQUEUED]);
    const triples = link.frames[2]![1] as (string | number)[];
    const told = new Map([[triples[0], triples.slice(1, 3)], [triples[3], triples.slice(4, 6)]]);
    expect(told).toEqual(new Map([["m0", [1, 30_000]], ["m1", [1, 2_000]]]));
  });

  it("Replication frames requeues by the thousand", () => {
    const { replication } = setup(1);
    const link = new FakeLink("s1");
    replication.attach(link, undefined, () => snapshot([]));
    for (let i = 0; i < REQUEUES_PER_FRAME + 1; i++) replication.requeued(`m${i}`, 1, 2_000);
    const requeues = () => link.frames.filter((frame) => frame[0] === OP.REQUEUED);
    expect(requeues().map((frame) => (frame[1] as unknown[]).length)).toEqual([3 * REQUEUES_PER_FRAME]);
    replication.flush();
    expect(requeues().map((frame) => (frame[1] as unknown[]).length)).toEqual([3 * REQUEUES_PER_FRAME, 3]);
    expect(requeues()[1]![1]).toEqual([`m${REQUEUES_PER_FRAME}`, 1, 1_000]);
  });
});
