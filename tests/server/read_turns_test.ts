/**
 * ReadTurns: a long read pauses its socket until the next turn of the event loop, so timers (the
 * etcd lease's renewals) run between the reads of a socket that stays readable; a pause for
 * backpressure is never undone by a turn's end. With a real socket fed megabytes, timers run
 * between long reads.
 */
import { describe, expect, it } from "bun:test";
import { connect } from "node:net";
import { LONG_READ_MS, ReadTurns } from "../../src/server/read_turns.ts";

const turn = () => new Promise((resolve) => setImmediate(resolve));

function recorded() {
  const calls: string[] = [];
  return { calls, socket: { pause: () => calls.push("pause"), resume: () => calls.push("resume") } };
}

const busy = (ms: number) => {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // a read that takes `ms`
  }
};

/** Writes 4 MiB to a socket, as fast as it takes them (call again on drain). */
function feeder() {
  const bytes = new Uint8Array(4 * 1024 * 1024);
  return (socket: { data: { sent: number }; write(b: Uint8Array): number }) => {
    while (socket.data.sent < bytes.length) {
      const n = socket.write(bytes.subarray(socket.data.sent));
      if (n <= 0) return;
      socket.data.sent += n;
    }
  };
}

/** Reads that each take 60 ms, and how many of them a 5 ms timer ran before. */
function longReads() {
  let count = 0;
  let ticks = 0;
  let afterTicks = 0;
  const timer = setInterval(() => ticks++, 5);
  return {
    read(reads: ReadTurns): void {
      const startedAt = performance.now();
      count++;
      if (ticks > 0) afterTicks++;
      ticks = 0;
      busy(60);
      reads.after(startedAt);
    },
    /** Without the turns, no timer runs between the reads of a socket that stays readable. */
    async expectTimersBetween(): Promise<void> {
      const deadline = Date.now() + 20_000;
      while (count < 6 && Date.now() < deadline) await Bun.sleep(20);
      expect(count).toBeGreaterThanOrEqual(6);
      expect(afterTicks).toBeGreaterThanOrEqual(count - 2);
    },
    stop: () => clearInterval(timer),
  };
}

describe("ReadTurns", () => {
  it("a short read reads on; a long one pauses until the next turn of the event loop", async () => {
    const { calls, socket } = recorded();
    const reads = new ReadTurns(socket);
    reads.after(performance.now());
    expect(calls).toEqual([]);
    const startedAt = performance.now();
    busy(LONG_READ_MS + 1);
    reads.after(startedAt);
    reads.after(startedAt); // a second long read in the same turn pauses once
    expect(calls).toEqual(["pause"]);
    await turn();
    expect(calls).toEqual(["pause", "resume"]);
  });

  it("a pause for backpressure stays through a turn's end, and its resume waits for the turn", async () => {
    const { calls, socket } = recorded();
    const reads = new ReadTurns(socket);
    reads.pause();
    const startedAt = performance.now();
    busy(LONG_READ_MS + 1);
    reads.after(startedAt);
    await turn();
    expect(calls).toEqual(["pause"]); // still held by its owner
    reads.resume();
    expect(calls).toEqual(["pause", "resume"]);

    // The owner resumes while a turn is pending: reading goes on when the turn ends, not before.
    const again = performance.now();
    busy(LONG_READ_MS + 1);
    reads.after(again);
    reads.resume();
    expect(calls).toEqual(["pause", "resume", "pause"]);
    await turn();
    expect(calls).toEqual(["pause", "resume", "pause", "resume"]);
  });

  it("a Bun socket (a client's or a peer's connection to the broker) fed megabytes: timers run between its long reads", async () => {
    const watch = longReads();
    let reads: ReadTurns | null = null;
    const server = Bun.listen<undefined>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open(socket) {
          reads = new ReadTurns(socket);
        },
        data: () => watch.read(reads!),
      },
    });
    const feed = feeder();
    const client = await Bun.connect<{ sent: number }>({ hostname: "127.0.0.1", port: server.port, socket: { data() {}, drain: feed } });
    try {
      client.data = { sent: 0 };
      feed(client);
      await watch.expectTimersBetween();
    } finally {
      watch.stop();
      client.end();
      server.stop(true);
    }
  });

  it("a node:net socket (a slave's link to its master) fed megabytes: timers run between its long reads", async () => {
    const watch = longReads();
    const feed = feeder();
    const server = Bun.listen<{ sent: number }>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open(socket) {
          socket.data = { sent: 0 };
          feed(socket);
        },
        drain: feed,
        data() {},
      },
    });
    const socket = connect({ host: "127.0.0.1", port: server.port });
    const reads = new ReadTurns(socket);
    socket.on("data", () => watch.read(reads));
    try {
      await watch.expectTimersBetween();
    } finally {
      watch.stop();
      socket.destroy();
      server.stop(true);
    }
  });
});
