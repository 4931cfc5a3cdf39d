/**
 * Queues spread over groups (the queue map in etcd), seen on the wire: real etcd, one in-process
 * broker per group, raw protocol clients. Placement agrees when two groups see a new queue at
 * once, a broker that does not own a queue answers NOT_OWNER naming the owner, MAP answers where
 * queues live, and the rules apply the same on every group.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "bun:test";
import { OP } from "../../src/protocol/mod.ts";
import { encode } from "../../src/protocol/cbor.ts";
import { type TestBroker, waitFor } from "../helpers/broker.ts";
import { startGroups } from "../helpers/groups.ts";
import { type EtcdCluster, startEtcd } from "../helpers/etcd.ts";
import { dial, hello, type Wire } from "../helpers/wire.ts";

let etcd: EtcdCluster;
const brokers: TestBroker[] = [];
const wires: Wire[] = [];

beforeAll(async () => {
  etcd = await startEtcd();
});

afterEach(async () => {
  for (const wire of wires.splice(0)) wire.close();
  await Promise.all(brokers.splice(0).map((broker) => broker.stop()));
});

afterAll(async () => {
  await etcd?.cleanup();
});

async function groups(names: string[], extra: Record<string, unknown> = {}): Promise<TestBroker[]> {
  const started = await startGroups(etcd, names, extra);
  brokers.push(...started);
  return started;
}

async function open(broker: TestBroker, client = "placement-test"): Promise<{ wire: Wire; welcome: Record<string, unknown> }> {
  const wire = await dial(broker.port);
  wires.push(wire);
  return { wire, welcome: await hello(wire, client) };
}

let ref = 1;

async function ask(wire: Wire, queues: string[]): Promise<unknown[]> {
  const sent = ref++;
  wire.send([OP.MAP, sent, queues]);
  for (;;) {
    // A client that asked MAP also hears of placements (MAP_INFO with ref null): not this answer.
    const answer = await wire.expectAny([OP.MAP_INFO, OP.ERROR], 6000);
    if (answer[1] === sent) return answer;
  }
}

async function send(wire: Wire, channel: string, n: number): Promise<unknown[]> {
  const sent = ref++;
  wire.send([OP.SEND, sent, channel, `m-${sent}`, encode({ n })]);
  for (;;) {
    const answer = await wire.expectAny([OP.OK, OP.ERROR], 6000);
    if (answer[0] === OP.OK && (answer[1] as number[]).includes(sent)) return answer;
    if (answer[0] === OP.ERROR && answer[1] === sent) return answer;
  }
}

describe("queue map on the wire (real etcd)", () => {
  it("welcome names the group and says queues follow a map", async () => {
    const [g1] = await groups(["g1"]);
    const { welcome } = await open(g1!);
    expect(welcome.group).toBe("g1");
    expect(welcome.map).toBe(true);
  });

  it("two groups that see new queues at once agree: one accepts each send, the other answers NOT_OWNER naming it", async () => {
    const [g1, g2] = await groups(["g1", "g2"]);
    const a = (await open(g1!)).wire;
    const b = (await open(g2!)).wire;
    const owners: string[] = [];
    for (let i = 0; i < 10; i++) {
      const queue = `race${i}/v1`;
      const [atA, atB] = await Promise.all([send(a, `${queue}/x`, i), send(b, `${queue}/x`, i)]);
      const answers = [atA!, atB!];
      const accepted = answers.filter((answer) => answer[0] === OP.OK);
      const refused = answers.filter((answer) => answer[0] === OP.ERROR);
      expect(accepted).toHaveLength(1);
      expect(refused).toHaveLength(1);
      const owner = atA![0] === OP.OK ? "g1" : "g2";
      owners.push(owner);
      expect(refused[0]![2]).toBe("NOT_OWNER");
      const details = refused[0]![4] as { queue: string; group: string; brokers: string[]; epoch: number };
      expect(details.queue).toBe(queue);
      expect(details.group).toBe(owner);
      const ownerBroker = owner === "g1" ? g1! : g2!;
      expect(details.brokers).toEqual([`127.0.0.1:${ownerBroker.port}@${owner}-1`]);
      expect(details.epoch).toBeGreaterThan(0);
      // Both brokers name the same owner in MAP, at the same epoch.
      const [infoA, infoB] = await Promise.all([ask(a, [queue]), ask(b, [queue])]);
      expect((infoA![2] as { queues: unknown }).queues).toEqual((infoB![2] as { queues: unknown }).queues);
      expect((infoA![2] as { queues: Record<string, { group: string }> }).queues[queue]!.group).toBe(owner);
    }
    // Least weight: new queues spread over both groups.
    expect(new Set(owners).size).toBe(2);
  });

  it("MAP places the queues it is asked about and lists every group's brokers; a listen on another group's queue is refused", async () => {
    const [g1, g2] = await groups(["g1", "g2"], { channels: { "pinned/v1": { group: "g2" } } });
    const { wire } = await open(g1!);
    const answer = await ask(wire, ["pinned/v1", "fresh/v1"]);
    expect(answer[0]).toBe(OP.MAP_INFO);
    const view = answer[2] as { epoch: number; queues: Record<string, { group: string; epoch: number }>; groups: Record<string, string[]> };
    expect(view.queues["pinned/v1"]!.group).toBe("g2"); // channels[q].group
    expect(Object.keys(view.queues).sort()).toEqual(["fresh/v1", "pinned/v1"]);
    expect(view.groups).toEqual({ g1: [`127.0.0.1:${g1!.port}@g1-1`], g2: [`127.0.0.1:${g2!.port}@g2-1`] });
    expect(view.epoch).toBeGreaterThanOrEqual(view.queues["fresh/v1"]!.epoch);

    wire.send([OP.LISTEN, ref, 1, "pinned", "v1", ["*"], null]);
    const refused = await wire.expect(OP.ERROR, 6000);
    expect(refused[1]).toBe(ref++);
    expect(refused[2]).toBe("NOT_OWNER");
    expect((refused[4] as { group: string }).group).toBe("g2");
    // The owner takes the registration.
    const owner = (await open(g2!)).wire;
    owner.send([OP.LISTEN, ref, 1, "pinned", "v1", ["*"], null]);
    expect((await owner.expect(OP.OK, 6000))[1]).toContain(ref++);
    // No queue object is made on the broker that refused.
    expect(g1!.broker.queues.has("pinned/v1")).toBe(false);
  });

  it("MAP refuses bad queue names and, under rules, queues the client may not use: the same on every group", async () => {
    const rules = [{ client: "reader", read: ["orders/v1/*"] }, { client: "writer", write: ["orders/*"] }];
    const [g1, g2] = await groups(["g1", "g2"], { rules });
    for (const broker of [g1!, g2!]) {
      const { wire } = await open(broker, "reader");
      const bad = await ask(wire, ["not-a-queue"]);
      expect([bad[0], bad[2]]).toEqual([OP.ERROR, "BAD_CHANNEL"]);
      const forbidden = await ask(wire, ["payments/v1"]);
      expect([forbidden[0], forbidden[2]]).toEqual([OP.ERROR, "NOT_ALLOWED"]);
      expect(forbidden[3]).toContain(`"reader"`);
      const allowed = await ask(wire, ["orders/v1"]);
      expect(allowed[0]).toBe(OP.MAP_INFO);
      // A send the rules refuse is refused before anything is placed.
      const refused = await send(wire, "audit/v1/x", 1);
      expect([refused[0], refused[2]]).toEqual([OP.ERROR, "NOT_ALLOWED"]);
    }
    expect(g1!.broker.placement.status()!.groups.g1!.queues.concat(g1!.broker.placement.status()!.groups.g2!.queues)).toEqual(["orders/v1"]);
  });

  it("a client that asked MAP is told when a queue is placed by another broker", async () => {
    const [g1, g2] = await groups(["g1", "g2"]);
    const { wire } = await open(g1!);
    await ask(wire, []);
    const other = (await open(g2!)).wire;
    await ask(other, ["told/v1"]);
    const pushed = await wire.expect(OP.MAP_INFO, 6000);
    expect(pushed[1]).toBe(null);
    const view = pushed[2] as { queues: Record<string, { group: string }> };
    expect(Object.keys(view.queues)).toEqual(["told/v1"]);
  });
});
