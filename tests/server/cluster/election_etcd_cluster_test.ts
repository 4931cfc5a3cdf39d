import { afterEach, describe, expect, it } from "bun:test";
import { waitFor } from "../../helpers/broker.ts";
import { type ChildElection, firstAt, type RecordedElection, spawnElection, startElection, testPrefix } from "../../helpers/election.ts";
import { type EtcdCluster, startEtcdCluster } from "../../helpers/etcd.ts";

const TTL = 2;

let etcd: EtcdCluster | null = null;
const inProcess: RecordedElection[] = [];
const children: ChildElection[] = [];

afterEach(async () => {
  await Promise.all(inProcess.splice(0).map((c) => c.election.stop()));
  await Promise.all(children.splice(0).map((c) => c.kill()));
  await etcd?.cleanup();
  etcd = null;
});

describe("Election on a three-node etcd cluster", () => {
  it("Election keeps its leader when an etcd follower dies, and still elects after the leader is killed", async () => {
    etcd = await startEtcdCluster(3);
    const prefix = testPrefix();
    const victim = spawnElection("victim", { endpoints: etcd.endpoints, prefix, leaseTtlSeconds: TTL });
    children.push(victim);
    await waitFor(() => victim.elections().length === 1, 10_000, "victim elected");
    const heir = startElection("heir", { endpoints: etcd.endpoints, prefix, leaseTtlSeconds: TTL });
    inProcess.push(heir);
    await waitFor(() => heir.election.leader?.id === "victim", 5000, "heir sees the victim lead");

    const raftLeader = await etcd.raftLeader();
    const follower = etcd.nodes.find((n) => n !== raftLeader)!;
    await follower.kill();
    // Two lease TTLs later the victim still leads on the same epoch: its renewals went on.
    const killedAt = performance.now();
    await waitFor(() => performance.now() - killedAt > 2 * TTL * 1000, 3 * TTL * 1000, "two TTLs");
    expect(victim.stepDowns()).toEqual([]);
    expect(heir.election.leader).toEqual({ id: "victim", epoch: victim.elections()[0]! });

    await victim.kill();
    await waitFor(() => heir.election.isLeader, 10_000, "heir elected on the two remaining nodes");
    expect(heir.election.epoch!).toBeGreaterThan(victim.elections()[0]!);
    await heir.election.publishIsr(["heir"]);
    expect(await heir.election.readIsr()).toEqual({ epoch: heir.election.epoch!, members: ["heir"] });
  }, 60_000); // its waits add up to 31 s past a three-node etcd's start: each wait is the check, not the runner's timeout

  it("Election: a leader cut off from its etcd node steps down before another broker is elected", async () => {
    etcd = await startEtcdCluster(3);
    const prefix = testPrefix();
    const lonely = etcd.nodes[0]!;
    const rest = etcd.nodes.slice(1);
    // The old master reaches etcd only through one node; that node is then cut off (SIGSTOP)
    // while the two others keep a quorum and serve the other broker.
    const old = startElection("old", { endpoints: [lonely.clientUrl], prefix, leaseTtlSeconds: TTL });
    inProcess.push(old);
    await waitFor(() => old.election.isLeader, 10_000, "old elected");
    const next = startElection("next", { endpoints: rest.map((n) => n.clientUrl), prefix, leaseTtlSeconds: TTL });
    inProcess.push(next);
    await waitFor(() => next.election.leader?.id === "old", 5000, "next sees old lead");

    const cutAt = performance.now();
    lonely.pause();
    await waitFor(() => next.election.isLeader, 15_000, "next elected");
    const steppedAt = firstAt(old.records, "steppedDown", cutAt);
    const electedAt = firstAt(next.records, "elected", cutAt)!;
    expect(steppedAt).toBeDefined();
    expect(steppedAt!).toBeLessThan(electedAt);
    expect(old.election.isLeader).toBe(false);

    // Back in touch, the old master follows the new one instead of fighting it. The resumed etcd
    // node must rejoin its cluster before it answers again: on a loaded host that took over 15 s.
    lonely.resume();
    await waitFor(() => old.election.leader?.id === "next", 30_000, "old sees next lead");
    expect(old.election.isLeader).toBe(false);
    expect(old.elections()).toHaveLength(1);
  }, 75_000); // its waits add up to 60 s past a three-node etcd's start: each wait is the check, not the runner's timeout

  it("Election keeps its leader while the etcd node its renewals go through hangs (SIGSTOP)", async () => {
    etcd = await startEtcdCluster(3);
    const raftLeader = await etcd.raftLeader();
    const followers = etcd.nodes.filter((n) => n !== raftLeader);
    // Renewals go through one of the two followers at any time, so pausing each in turn hangs the
    // node they go through at least once; the cluster keeps a quorum throughout.
    // A longer lease than the other tests': moving renewals to the other node must fit in its
    // margin even on a loaded machine (the mechanism, not a timing, is what is tested).
    const ttl = 5;
    const leader = startElection("leader", { endpoints: followers.map((n) => n.clientUrl), prefix: testPrefix(), leaseTtlSeconds: ttl });
    inProcess.push(leader);
    await waitFor(() => leader.election.isLeader, 10_000, "elected");
    const epoch = leader.election.epoch;
    for (const follower of followers) {
      follower.pause();
      const pausedAt = performance.now();
      await waitFor(() => performance.now() - pausedAt > 2 * ttl * 1000, 3 * ttl * 1000, "two TTLs");
      follower.resume();
    }
    expect(leader.stepDowns()).toEqual([]);
    expect(leader.election.epoch).toBe(epoch);
    await leader.election.publishIsr(["leader"]);
  }, 60_000);
});
