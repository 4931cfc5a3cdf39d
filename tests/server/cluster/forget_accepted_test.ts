/**
 * A slave that drops messages it accepted because its master does not hold them forgets that it
 * accepted them: a resend of one is stored again, never answered as a duplicate of a message
 * held nowhere (intake.ts forgetAcceptedIds). The way back to where two logs part is tested end to
 * end in tests/e2e/catch_up_test.ts; here, the end of a snapshot catch-up, driven through the
 * slave's link target as its link to the master drives it.
 */
import { expect, it } from "bun:test";
import { encode, OP } from "../../../src/protocol/mod.ts";
import type { AppendOp } from "../../../src/protocol/peer_ops.ts";
import { Broker } from "../../../src/server/broker.ts";
import { parseConfig } from "../../../src/server/config/config.ts";
import { memoryLogger } from "../../../src/server/log.ts";

const sender = { clientId: "resender", grants: { canWrite: () => true } } as never;

function slave(): Broker {
  const config = parseConfig({ durability: "memory", isMaster: false, cluster: { peers: ["127.0.0.1:9@master"] } });
  const broker = new Broker(config, { logger: memoryLogger(), store: null });
  broker.recover();
  return broker;
}

const append = (index: number, id: string): AppendOp =>
  [OP.APPEND, index, id, "jobs/v1", "x", encode({ index }), Date.now(), 0, null] as AppendOp;

it("a slave whose snapshot catch-up drops messages it accepted stores a resend of one again", () => {
  const broker = slave();
  const target = broker.cluster.upstream.target;
  const before = target.nextSeq();
  target.append(append(1, "client.1"), 0);
  target.append(append(2, "client.2"), 0);
  expect(broker.queues.get("jobs/v1")!.live).toBe(2);
  broker.send("jobs/v1/x", "client.1", encode({ again: true }), sender); // a duplicate while held
  expect(broker.queues.get("jobs/v1")!.live).toBe(2);

  // A snapshot (generation 1) that holds only client.2: client.1 is not on the master.
  target.append(append(2, "client.2"), 1);
  target.synced(1, before + 2, 2, []);
  expect(broker.queues.get("jobs/v1")!.live).toBe(1);

  broker.send("jobs/v1/x", "client.1", encode({ again: true }), sender);
  expect(broker.queues.get("jobs/v1")!.live).toBe(2); // stored again, as a client's send to a slave
});
