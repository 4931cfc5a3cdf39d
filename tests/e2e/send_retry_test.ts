/**
 * Sends ride through a refusal that waiting fixes, with real brokers: a master whose only slave is
 * not running refuses every send with NOT_ENOUGH_REPLICAS (cluster.minInSyncReplicas 2); the
 * client keeps each send and sends it again until the slave is in sync, and the application sees
 * each send confirmed, none refused.
 */
import { afterEach, expect, it } from "bun:test";
import { KittenError } from "../../mod.ts";
import { encode, OP } from "../../src/protocol/mod.ts";
import { rejection, uniqueClientId, waitFor } from "../helpers/broker.ts";
import { Peers, range } from "../helpers/peers.ts";
import { dial, hello } from "../helpers/wire.ts";

const peers = new Peers();
afterEach(() => peers.teardown());

/** Proof that the master refuses now: a send of another client, with a short sendTimeoutMs, times out on NOT_ENOUGH_REPLICAS. */
async function expectRefusing(host: string): Promise<void> {
  const { mq: probe } = await peers.client([host], { sendTimeoutMs: 200 });
  const error = await rejection(probe.send("probe/v1/x", { probe: true }));
  expect({ code: error.code, cause: (error.cause as KittenError).code }).toEqual({ code: "TIMEOUT", cause: "NOT_ENOUGH_REPLICAS" });
  await probe.disconnect();
}

for (const hosts of ["the master", "the master and the slave"] as const) {
  it(`e2e: sends refused with NOT_ENOUGH_REPLICAS while the slave is away are confirmed once it is in sync, with no error to the application (client of ${hosts})`, async () => {
    const [master, slave] = await peers.cluster(2, { cluster: { minInSyncReplicas: 2 } });
    master!.start();
    const { mq, errors } = await peers.client(hosts === "the master" ? [master!.host] : [master!.host, slave!.host]);
    const outcomes: string[] = [];
    const sends = range(0, 50).map((n) =>
      mq.send("ride/v1/x", { n }).then(() => outcomes.push("confirmed"), (error: KittenError) => outcomes.push(error.code))
    );
    await expectRefusing(master!.host); // the sends above were refused too: they went first
    expect(outcomes).toEqual([]);
    expect(master!.live("ride/v1")).toBe(0); // refused: nothing stored

    slave!.start();
    await waitFor(() => master!.broker.cluster.status().inSync.length === 2, 10_000, "slave in sync");
    await Promise.all(sends);
    expect(outcomes).toEqual(Array(50).fill("confirmed"));
    expect(errors.filter((error) => error instanceof KittenError)).toEqual([]); // only the slave's refused connections
    // Confirmed means held by both, once each: the resends were not queued twice.
    expect(master!.live("ride/v1")).toBe(50);
    expect(slave!.live("ride/v1")).toBe(50);
  }, 30_000);
}

// The client sends a refused send again with its message id, after later ids of the same sender
// may have been accepted: the broker must not take the refused one for one it holds.
it("e2e: a send refused with NOT_ENOUGH_REPLICAS, then sent again after a later id of its sender was accepted, is stored, not taken for a duplicate", async () => {
  const [master, slave] = await peers.cluster(2, { cluster: { minInSyncReplicas: 2 } });
  master!.start();
  const wire = await dial(master!.port);
  await hello(wire, uniqueClientId());
  wire.send([OP.SEND, 1, "dedup/v1/x", "sender.0", encode({ n: 0 })]);
  expect((await wire.expect(OP.ERROR))[2]).toBe("NOT_ENOUGH_REPLICAS");
  slave!.start();
  await waitFor(() => master!.broker.cluster.status().inSync.length === 2, 10_000, "slave in sync");
  wire.send([OP.SEND, 2, "dedup/v1/x", "sender.1", encode({ n: 1 })]);
  expect((await wire.expect(OP.OK))[1]).toEqual([2]);
  wire.send([OP.SEND, 3, "dedup/v1/x", "sender.0", encode({ n: 0 })]);
  expect((await wire.expect(OP.OK))[1]).toEqual([3]);
  wire.close();
  expect(master!.live("dedup/v1")).toBe(2);
}, 20_000);
