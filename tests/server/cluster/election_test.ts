import { afterAll, afterEach, beforeAll, describe, expect, it } from "bun:test";
import { KittenError } from "../../../src/protocol/errors.ts";
import { waitFor } from "../../helpers/broker.ts";
import { type ChildElection, firstAt, type RecordedElection, spawnElection, startElection, testPrefix } from "../../helpers/election.ts";
import { type EtcdCluster, startEtcd } from "../../helpers/etcd.ts";

const TTL = 2; // seconds; etcd's smallest lease TTL with its default election timeout

let etcd: EtcdCluster;
const inProcess: RecordedElection[] = [];
const children: ChildElection[] = [];

function start(name: string, prefix: string, eligible = true): RecordedElection {
  const recorded = startElection(name, { endpoints: etcd.endpoints, prefix, leaseTtlSeconds: TTL }, eligible);
  inProcess.push(recorded);
  return recorded;
}

function spawn(name: string, prefix: string): ChildElection {
  const child = spawnElection(name, { endpoints: etcd.endpoints, prefix, leaseTtlSeconds: TTL });
  children.push(child);
  return child;
}

async function leaderOf(candidates: RecordedElection[]): Promise<RecordedElection> {
  await waitFor(() => candidates.filter((c) => c.election.isLeader).length === 1, 10_000, "one leader");
  return candidates.find((c) => c.election.isLeader)!;
}

beforeAll(async () => {
  etcd = await startEtcd();
});

afterEach(async () => {
  for (const node of etcd.nodes) node.resume();
  await Promise.all(inProcess.splice(0).map((c) => c.election.stop()));
  await Promise.all(children.splice(0).map((c) => c.kill()));
});

afterAll(async () => {
  await etcd?.cleanup();
});

describe("Election", () => {
  it("Election elects exactly one of three candidates, and all of them observe it", async () => {
    const prefix = testPrefix();
    const candidates = ["a", "b", "c"].map((name) => start(name, prefix));
    const leader = await leaderOf(candidates);
    const expected = { id: leader.name, epoch: leader.election.epoch! };
    await waitFor(() => candidates.every((c) => c.election.leader?.epoch === expected.epoch), 5000, "everyone sees the leader");
    for (const c of candidates) expect(c.election.leader).toEqual(expected);
    expect(candidates.filter((c) => c.election.isLeader)).toHaveLength(1);
    expect(candidates.flatMap((c) => c.elections())).toEqual([expected.epoch]);
    for (const c of candidates.filter((c) => c !== leader)) expect(c.election.epoch).toBeNull();
  });

  it("Election epochs strictly increase from one leader to the next", async () => {
    const prefix = testPrefix();
    const candidates = ["a", "b", "c"].map((name) => start(name, prefix));
    const epochs: number[] = [];
    for (let round = 0; round < 4; round++) {
      const leader = await leaderOf(candidates);
      epochs.push(leader.election.epoch!);
      await leader.election.resign();
      expect(leader.election.isLeader).toBe(false);
      expect(leader.stepDowns().at(-1)).toBe("resigned");
      // Stand again, so the next round may elect it again with a new epoch.
      leader.election.setEligible(true);
      await waitFor(() => candidates.some((c) => c.election.isLeader && c.election.epoch! > epochs.at(-1)!), 10_000, "next leader");
    }
    for (let i = 1; i < epochs.length; i++) expect(epochs[i]).toBeGreaterThan(epochs[i - 1]!);
    // Every elected event, whoever got it, in the order seen: strictly increasing too.
    const all = candidates
      .flatMap((c) => c.records.filter((r) => r.event === "elected"))
      .sort((x, y) => x.at - y.at)
      .map((r) => (r.event === "elected" ? r.epoch : 0));
    for (let i = 1; i < all.length; i++) expect(all[i]).toBeGreaterThan(all[i - 1]!);
  });

  it("Election never elects an ineligible candidate, and elects it once it stands", async () => {
    const prefix = testPrefix();
    const a = start("a", prefix);
    const bystander = start("b", prefix, false);
    await leaderOf([a]);
    await waitFor(() => bystander.election.leader?.id === "a", 5000, "b sees a");

    // The seat is free and b is the only one left: it still must not take it.
    await a.election.resign();
    await waitFor(() => bystander.election.leader === null, 5000, "b sees the seat free");
    const c = start("c", prefix);
    await waitFor(() => c.election.isLeader, 10_000, "c elected");
    await waitFor(() => bystander.election.leader?.id === "c", 5000, "b sees c");
    expect(bystander.elections()).toEqual([]);
    expect(bystander.election.isLeader).toBe(false);

    // Withdrawing takes effect before the seat frees up; standing again wins it.
    a.election.setEligible(false);
    await c.election.resign();
    bystander.election.setEligible(true);
    await waitFor(() => bystander.election.isLeader, 10_000, "b elected once eligible");
    expect(a.elections()).toHaveLength(1);
  });

  it("Election: a leader that becomes ineligible keeps leading", async () => {
    const prefix = testPrefix();
    const a = start("a", prefix);
    const b = start("b", prefix);
    const leader = await leaderOf([a, b]);
    const epoch = leader.election.epoch;
    leader.election.setEligible(false);
    await leader.election.publishIsr([leader.name]);
    expect(leader.election.isLeader).toBe(true);
    expect(leader.election.epoch).toBe(epoch);
    expect(leader.stepDowns()).toEqual([]);
  });

  it("Election replaces a leader killed with SIGKILL within the lease TTL + 1 s", async () => {
    const prefix = testPrefix();
    const victim = spawn("victim", prefix);
    await waitFor(() => victim.elections().length === 1, 10_000, "victim elected");
    const heir = start("heir", prefix);
    await waitFor(() => heir.election.leader?.id === "victim", 5000, "heir sees the victim lead");

    const killedAt = performance.now();
    await victim.kill();
    await waitFor(() => heir.election.isLeader, 10_000, "heir elected");
    const electedAt = firstAt(heir.records, "elected", killedAt)!;
    // Nothing revoked the victim's lease: etcd expired it, at most TTL after its last renewal.
    expect(electedAt - killedAt).toBeLessThan((TTL + 1) * 1000);
    expect(heir.election.epoch!).toBeGreaterThan(victim.elections()[0]!);
  });

  it("Election: a stopped leader (no resign) is replaced at once, its lease revoked", async () => {
    const prefix = testPrefix();
    const a = start("a", prefix);
    const b = start("b", prefix);
    const leader = await leaderOf([a, b]);
    const other = leader === a ? b : a;
    const epoch = leader.election.epoch!;
    await leader.election.stop();
    expect(leader.stepDowns()).toEqual(["stopped"]);
    await waitFor(() => other.election.isLeader, 10_000, "the other elected");
    expect(other.election.epoch!).toBeGreaterThan(epoch);
  });

  it("Election: a leader cut off from etcd (SIGSTOP) steps down before its lease can expire, and stands again after", async () => {
    const prefix = testPrefix();
    const a = start("a", prefix);
    await leaderOf([a]);
    const firstEpoch = a.election.epoch!;

    const pausedAt = performance.now();
    etcd.nodes[0]!.pause();
    await waitFor(() => !a.election.isLeader, 10_000, "a steps down");
    const steppedAt = firstAt(a.records, "steppedDown", pausedAt)!;
    // The last renewal etcd confirmed was sent before the pause; etcd cannot expire the lease
    // sooner than TTL after that send, and the step-down comes a margin before.
    expect(steppedAt - pausedAt).toBeLessThan(TTL * 1000);
    expect(a.stepDowns()[0]).toContain("no lease renewal confirmed by etcd");

    etcd.nodes[0]!.resume();
    await waitFor(() => a.election.isLeader, 15_000, "a elected again once etcd is back");
    expect(a.election.epoch!).toBeGreaterThan(firstEpoch);
  });

  it("Election.publishIsr() writes for the leader only, fenced by its epoch", async () => {
    const prefix = testPrefix();
    const a = start("a", prefix);
    const b = start("b", prefix);
    const leader = await leaderOf([a, b]);
    const follower = leader === a ? b : a;
    expect(await leader.election.readIsr()).toBeNull();

    await leader.election.publishIsr(["a", "b"]);
    expect(await follower.election.readIsr()).toEqual({ epoch: leader.election.epoch!, members: ["a", "b"] });

    const refused = await follower.election.publishIsr(["b"]).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(KittenError);
    expect((refused as KittenError).code).toBe("FENCED");
    expect((refused as KittenError).message).toContain(`broker "${follower.name}" does not lead`);
    expect((await leader.election.readIsr())?.members).toEqual(["a", "b"]);
  });

  it("Election.publishIsr() is refused once the leader key is no longer the leader's", async () => {
    const prefix = testPrefix();
    const a = start("a", prefix);
    await leaderOf([a]);
    // Ineligible, so a does not take the seat again once it sees it lost.
    a.election.setEligible(false);
    // Another writer overwrites the leader key behind a's back (its create revision, a's epoch,
    // stays; its lease and value do not): etcd's transaction or a's watch must fence a.
    const { Etcd3 } = await import("etcd3");
    const raw = new Etcd3({ hosts: etcd.endpoints });
    try {
      await raw.put(`${prefix}groups/default/leader`).value("intruder");
      const refused = await a.election.publishIsr(["a"]).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(KittenError);
      expect((refused as KittenError).code).toBe("FENCED");
      expect(a.election.isLeader).toBe(false);
      expect(a.stepDowns()).toHaveLength(1);
      expect(await a.election.readIsr()).toBeNull();
    } finally {
      raw.close();
    }
  });
});
