import { afterAll, afterEach, beforeAll, describe, expect, it } from "bun:test";
import { waitFor } from "../../helpers/broker.ts";
import { testPrefix } from "../../helpers/election.ts";
import { type EtcdCluster, startEtcd } from "../../helpers/etcd.ts";
import { Etcd3 } from "etcd3";
import { QueueMap } from "../../../src/server/cluster/queue_map.ts";

let etcd: EtcdCluster;
const started: QueueMap[] = [];

interface Recorded {
  map: QueueMap;
  changes: string[];
}

function start(serviceId: string, group: string, prefix: string): Recorded {
  const changes: string[] = [];
  const map = new QueueMap({
    endpoints: etcd.endpoints,
    prefix,
    group,
    serviceId,
    address: () => `127.0.0.1:7000@${serviceId}`,
    leaseTtlSeconds: 2,
    log: () => {},
    changed: (queues) => changes.push(...queues),
  });
  started.push(map);
  map.start();
  return { map, changes };
}

beforeAll(async () => {
  etcd = await startEtcd();
});

afterEach(async () => {
  await Promise.all(started.splice(0).map((map) => map.stop()));
});

afterAll(async () => {
  await etcd?.cleanup();
});

describe("QueueMap (real etcd)", () => {
  it("two brokers placing a new queue at once agree on one group, and every broker learns it", async () => {
    const prefix = testPrefix();
    const a = start("a1", "g1", prefix);
    const b = start("b1", "g2", prefix);
    const c = start("c1", "g2", prefix);
    await Promise.all([a.map.ready, b.map.ready, c.map.ready]);
    await waitFor(() => Object.keys(a.map.groups()).length === 2 && Object.keys(b.map.groups()).length === 2, 5000, "both groups seen");
    for (let round = 0; round < 20; round++) {
      const queue = `orders${round}/v1`;
      // Each names a different group: only one transaction creates the key.
      const [first, second] = await Promise.all([a.map.place(queue, "g1"), b.map.place(queue, "g2")]);
      expect(second).toEqual(first);
      await waitFor(() => c.map.owner(queue)?.group === first.group, 5000, `c learns ${queue}`);
      expect(c.map.owner(queue)).toEqual(first);
    }
    expect(c.changes).toContain("orders0/v1");
    const { Etcd3 } = await import("etcd3");
    const raw = new Etcd3({ hosts: etcd.endpoints });
    try {
      const stored = JSON.parse((await raw.get(`${prefix}queues/orders0/v1`).string())!);
      expect(stored.group).toBe(c.map.owner("orders0/v1")!.group);
    } finally {
      raw.close();
    }
  });

  it("places a queue on the group of least weight, and lists each group's live brokers", async () => {
    const prefix = testPrefix();
    const a = start("a1", "g1", prefix);
    const b = start("b1", "g2", prefix);
    await Promise.all([a.map.ready, b.map.ready]);
    await waitFor(() => Object.keys(a.map.groups()).length === 2, 5000, "both groups seen");
    expect(a.map.groups()).toEqual({ g1: ["127.0.0.1:7000@a1"], g2: ["127.0.0.1:7000@b1"] });
    await a.map.place("first/v1", "g1");
    await a.map.place("second/v1", "g1");
    // g1 owns two queues, g2 none: the next goes to g2, then they alternate on equal weight.
    expect((await a.map.place("third/v1")).group).toBe("g2");
    expect((await a.map.place("fourth/v1")).group).toBe("g2");
    expect((await a.map.place("fifth/v1")).group).toBe("g1");
    const view = a.map.view(["first/v1", "third/v1", "unplaced/v1"]);
    expect(Object.keys(view.queues).sort()).toEqual(["first/v1", "third/v1"]);
    expect(view.queues["third/v1"]!.epoch).toBeGreaterThan(view.queues["first/v1"]!.epoch);
    expect(view.epoch).toBeGreaterThanOrEqual(view.queues["third/v1"]!.epoch);
    // A broker that stops revokes its lease: its member key, and so its address, leaves the map.
    const bMap = b.map;
    started.splice(started.indexOf(bMap), 1);
    await bMap.stop();
    await waitFor(() => a.map.groups().g2 === undefined, 5000, "b1 leaves the map");
    expect((await a.map.place("sixth/v1")).group).toBe("g1");
  });

  it("a broker started later reads the placements made before it", async () => {
    const prefix = testPrefix();
    const a = start("a1", "g1", prefix);
    await a.map.ready;
    const placed = await a.map.place("early/v1");
    expect(placed.group).toBe("g1");
    const late = start("z1", "g2", prefix);
    await late.map.ready;
    expect(late.map.owner("early/v1")).toEqual(placed);
    expect(late.changes).toContain("early/v1");
    // Placing it again changes nothing: the first placement stands.
    expect(await late.map.place("early/v1", "g2")).toEqual(placed);
  });

  it("a broker whose event loop stalled past its lease's TTL registers again with one lease, not one per loss etcd3 reports", async () => {
    const prefix = testPrefix();
    const etcdClient = new Etcd3({ hosts: etcd.endpoints });
    try {
      const leases = async () => (await etcdClient.leaseClient.leaseLeases()).leases.length;
      const before = await leases();
      const a = start("a1", "g1", prefix);
      await a.map.ready;
      await waitFor(() => a.map.groups().g1?.length === 1, 5000, "a1 is registered");
      expect(await leases()).toBe(before + 1);
      Bun.sleepSync(5_000); // past 2 × TTL: etcd3 reports the lease lost, from its timer and from its stream
      await waitFor(async () => (await leases()) === before + 1 && a.map.groups().g1?.length === 1, 10_000, "a1 is registered again");
      // Give a second registration time to show up: it would keep a lease of its own alive.
      await Bun.sleep(2_000);
      expect(await leases()).toBe(before + 1);
    } finally {
      etcdClient.close();
    }
  }, 30_000);
});
