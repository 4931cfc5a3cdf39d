import { afterAll, afterEach, beforeAll, describe, expect, it } from "bun:test";
import { waitFor } from "../../helpers/broker.ts";
import { type RecordedElection, startElection, testPrefix } from "../../helpers/election.ts";
import { type EtcdCluster, startEtcd } from "../../helpers/etcd.ts";

let etcd: EtcdCluster;
const started: RecordedElection[] = [];

function start(name: string, prefix: string, group: string): RecordedElection {
  const recorded = startElection(name, { endpoints: etcd.endpoints, prefix, leaseTtlSeconds: 2, group });
  started.push(recorded);
  return recorded;
}

beforeAll(async () => {
  etcd = await startEtcd();
});

afterEach(async () => {
  await Promise.all(started.splice(0).map((c) => c.election.stop()));
});

afterAll(async () => {
  await etcd?.cleanup();
});

describe("Election per group", () => {
  it("two groups under one prefix each elect their own master, under <prefix>groups/<group>/leader", async () => {
    const prefix = testPrefix();
    const a = [start("a1", prefix, "g1"), start("a2", prefix, "g1")];
    const b = [start("b1", prefix, "g2"), start("b2", prefix, "g2")];
    await waitFor(() => a.some((c) => c.election.isLeader) && b.some((c) => c.election.isLeader), 10_000, "a leader in each group");
    expect(a.filter((c) => c.election.isLeader)).toHaveLength(1);
    expect(b.filter((c) => c.election.isLeader)).toHaveLength(1);
    const { Etcd3 } = await import("etcd3");
    const raw = new Etcd3({ hosts: etcd.endpoints });
    try {
      const leaderA = a.find((c) => c.election.isLeader)!;
      const leaderB = b.find((c) => c.election.isLeader)!;
      expect(await raw.get(`${prefix}groups/g1/leader`).string()).toBe(leaderA.name);
      expect(await raw.get(`${prefix}groups/g2/leader`).string()).toBe(leaderB.name);
      // Each group sees its own leader only.
      await waitFor(() => a.every((c) => c.election.leader?.id === leaderA.name), 5000, "g1 sees its leader");
      expect(b.every((c) => c.election.leader?.id === leaderB.name)).toBe(true);
    } finally {
      raw.close();
    }
  });

  it("the group default does not elect while a broker of an older version holds <prefix>leader", async () => {
    const prefix = testPrefix();
    const { Etcd3 } = await import("etcd3");
    const raw = new Etcd3({ hosts: etcd.endpoints });
    try {
      await raw.put(`${prefix}leader`).value("old-broker");
      const candidate = start("new", prefix, "default");
      const other = start("other", prefix, "g2");
      await waitFor(() => candidate.records.some((r) => r.event === "log" && r.message.includes("an older broker leads")), 10_000, "the warning");
      await waitFor(() => other.election.isLeader, 10_000, "another group elects");
      expect(candidate.election.isLeader).toBe(false);
      await raw.delete().key(`${prefix}leader`);
      await waitFor(() => candidate.election.isLeader, 10_000, "elected once the old key is gone");
    } finally {
      raw.close();
    }
  });

  it("the leader of the group default also holds <prefix>leader and <prefix>isr, so older brokers follow it; they go when it resigns", async () => {
    const prefix = testPrefix();
    const { Etcd3 } = await import("etcd3");
    const raw = new Etcd3({ hosts: etcd.endpoints });
    try {
      const leader = start("new", prefix, "default");
      const other = start("other", prefix, "g2");
      await waitFor(() => leader.election.isLeader && other.election.isLeader, 10_000, "both groups elect");
      const [legacy, grouped] = await Promise.all([raw.get(`${prefix}leader`).exec(), raw.get(`${prefix}groups/default/leader`).exec()]);
      expect(legacy.kvs[0]?.value.toString()).toBe("new");
      // One transaction: an older broker reads the same epoch (create revision) as this version's.
      expect(legacy.kvs[0]?.create_revision).toBe(grouped.kvs[0]!.create_revision);
      expect(Number(legacy.kvs[0]!.create_revision)).toBe(leader.election.epoch!);
      await leader.election.publishIsr(["new", "b"]);
      expect(JSON.parse((await raw.get(`${prefix}isr`).string())!)).toEqual({ epoch: leader.election.epoch, members: ["new", "b"] });
      // Another group leaves the older brokers' keys alone.
      await other.election.publishIsr(["other"]);
      expect(JSON.parse((await raw.get(`${prefix}isr`).string())!).members).toEqual(["new", "b"]);
      await leader.election.resign();
      expect(await raw.get(`${prefix}leader`).string()).toBeNull();
      expect(await raw.get(`${prefix}groups/default/leader`).string()).toBeNull();
      expect(await raw.get(`${prefix}groups/g2/leader`).string()).toBe("other");
    } finally {
      raw.close();
    }
  });
});
