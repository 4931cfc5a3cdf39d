/**
 * A move gives way to the clients (move/pacer.ts, move/traffic.ts), seen on the wire between two
 * broker processes (real etcd, one broker per group, g2 behind a relay that watches its frames):
 * each MOVE_ACK of the target carries its clients' traffic against what it was before the move,
 * a ratio while they send enough to tell, null otherwise.
 */
import { expect, it } from "bun:test";
import type { Client } from "../../mod.ts";
import { type MoveDeployment, moveSuite } from "../helpers/move_cluster.ts";
import { OP } from "../../src/protocol/mod.ts";
import { MIN_TRAFFIC } from "../../src/server/move/traffic.ts";

const suite = moveSuite();
const client = suite.client;

/** Moves `moved/v1` (a backlog of `backlog` on g1) to g2 and returns the MOVE_ACKs g2 wrote to g1. */
async function movedWatching(d: MoveDeployment, publisher: Client, backlog: number): Promise<unknown[][]> {
  const pending: Promise<void>[] = [];
  for (let n = 0; n < backlog; n++) pending.push(publisher.send("moved/v1/x", { n }));
  await Promise.all(pending);
  const acks: unknown[][] = [];
  const target = d.brokers.find((b) => b.group === "g2")!;
  target.relay!.holdAfterFrame((frame) => {
    if (Array.isArray(frame) && frame[0] === OP.MOVE_ACK) acks.push(frame);
    return false; // watched, never held
  });
  const record = await d.requestMove("moved/v1", "g2");
  const ended = await d.waitForRecord("moved/v1", (r) => r.id === record.id && r.state !== "copying", 30_000, "the move ends");
  // Why it did not finish, for a failure that does not come back when run again.
  if (ended.state !== "done") {
    throw new Error(`the move ended ${ended.state}: ${ended.reason ?? "no reason recorded"}\n${moveLines(d)}`);
  }
  if (acks.length === 0) throw new Error(`the move ended done, and no MOVE_ACK crossed the relay\n${moveLines(d)}`);
  return acks;
}

/** What each broker logged about moves, for a failure that does not come back when run again. */
function moveLines(d: MoveDeployment): string {
  return d.brokers
    .map((broker) => {
      const lines = (broker.child?.output() ?? "").split("\n").filter((line) => /move|master|elect/i.test(line));
      return `${broker.name}:\n${lines.slice(-30).join("\n")}`;
    })
    .join("\n");
}

it("a target whose clients send too little to tell answers every MOVE_ACK with traffic null", async () => {
  const d = suite.deploy();
  await d.start(["g1", "g2"], 1, { channels: { "moved/v1": { group: "g1" } } }, ["g2"]);
  const acks = await movedWatching(d, await client(d.hosts(), "publisher"), 2000);
  expect(acks.map((ack) => ack[2])).toEqual(acks.map(() => null));
}, 60_000);

it("a target whose clients send more than MIN_TRAFFIC a second tells the source how much of it is left", async () => {
  const d = suite.deploy();
  await d.start(["g1", "g2"], 1, { channels: { "moved/v1": { group: "g1" }, "busy/v1": { group: "g2" } } }, ["g2"]);
  const busy = await client(d.hosts(), "busy");
  // Twice MIN_TRAFFIC, steady, for the 2 s before the move and during it.
  let sending = true;
  const lane = (async () => {
    const started = performance.now();
    let sent = 0;
    const inFlight: Promise<void>[] = [];
    while (sending) {
      const due = Math.floor(((performance.now() - started) / 1000) * 2 * MIN_TRAFFIC);
      for (; sent < due; sent++) inFlight.push(busy.send("busy/v1/y", { sent }));
      await Bun.sleep(5);
    }
    await Promise.all(inFlight);
  })();
  // The baseline is the traffic of the 2 s before the move: time itself is what is waited for.
  await Bun.sleep(2_500);
  const acks = await movedWatching(d, await client(d.hosts(), "publisher"), 2000);
  sending = false;
  await lane;
  const ratios = acks.map((ack) => ack[2]).filter((ratio): ratio is number => typeof ratio === "number");
  expect(ratios.length).toBeGreaterThan(0);
  for (const ratio of ratios) expect(ratio).toBeGreaterThan(0);
}, 60_000);
