/**
 * The lease keeper's single renewals while etcd3's keep-alive stream is silent: they go through
 * each etcd node in turn, so a node that hangs cannot make the holder step down while another node
 * answers; and the holder does step down when none answers.
 */
import { describe, expect, it } from "bun:test";
import { EventEmitter } from "node:events";
import type { Etcd3 } from "etcd3";
import { LeaseKeeper, stepDownAfterMs } from "../../../src/server/cluster/lease_keeper.ts";

/** An etcd3 lease whose keep-alive stream never answers (the node it goes through hangs). */
class SilentLease extends EventEmitter {
  grant = () => Promise.resolve("7");
  revoke = () => Promise.resolve();
  release = () => undefined;
}

const TTL_SECONDS = 1;

function keeper(renewThrough: (index: number) => Promise<number>, endpointCount = 2) {
  const calls: number[] = [];
  const lost: string[] = [];
  const client = { lease: () => new SilentLease() } as unknown as Etcd3;
  const keeper = new LeaseKeeper(client, {
    ttlSeconds: TTL_SECONDS,
    endpointCount,
    renewThrough: (index) => {
      calls.push(index);
      return renewThrough(index);
    },
    now: () => performance.now(),
    log: () => undefined,
    onLost: (reason) => lost.push(reason),
  });
  return { keeper, calls, lost };
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 10));
}

const hangs = () => new Promise<number>(() => undefined);

describe("LeaseKeeper single renewals", () => {
  it("go through each etcd node in turn, and keep the lease while one node hangs and the other answers", async () => {
    const { keeper: k, calls, lost } = keeper((index) => (index === 0 ? hangs() : Promise.resolve(TTL_SECONDS)));
    await k.grant();
    // Three step-down budgets' worth of renewals: the lease would be lost after one without them.
    const budgetMs = stepDownAfterMs(TTL_SECONDS);
    const start = performance.now();
    await until(() => performance.now() - start > 3 * budgetMs || lost.length > 0);
    expect(lost).toEqual([]);
    expect(calls.length).toBeGreaterThan(6);
    expect(calls.slice(0, 6)).toEqual([0, 1, 0, 1, 0, 1]);
    expect(k.renewedAt).toBeGreaterThan(start);
    await k.release(false);
  });

  it("gives the lease up when no node answers in time", async () => {
    const { keeper: k, calls, lost } = keeper(hangs);
    await k.grant();
    await until(() => lost.length > 0);
    expect(lost[0]).toContain("no lease renewal confirmed by etcd");
    expect(new Set(calls)).toEqual(new Set([0, 1]));
    expect(k.id).toBeNull();
  });

  it("gives the lease up at once when a node says it expired", async () => {
    const { keeper: k, lost } = keeper(() => Promise.resolve(0), 1);
    await k.grant();
    await until(() => lost.length > 0);
    expect(lost[0]).toContain("expired");
  });
});
