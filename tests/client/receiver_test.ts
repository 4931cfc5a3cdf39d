/**
 * Receiver: with several brokers, a delivery that repeats one acked before is acked again without
 * running the handler, when it comes through another link (a new master) — also long after the
 * last change of link, from the acks remembered.
 */
import { describe, expect, it } from "bun:test";
import { encode } from "cbor-x";
import type { HostConnection } from "../../src/client/connection.ts";
import type { MasterTracker } from "../../src/client/masters.ts";
import { Receiver } from "../../src/client/receiver.ts";
import { type ConsumeHandler, Subscription, type SubscriptionHost } from "../../src/client/subscription.ts";

interface FakeLink {
  name: string;
  generation: number;
  takesCopies: boolean;
  acks: number[];
  ack(sub: number, tag: number): void;
  send(op: unknown[]): void;
  mirror(): void;
}

function link(name: string): FakeLink {
  return {
    name,
    generation: 0,
    takesCopies: false,
    acks: [],
    ack(_sub, tag) {
      this.acks.push(tag);
    },
    send() {},
    mirror() {},
  };
}

function setup() {
  const handled: string[] = [];
  const host: SubscriptionHost = { request: () => Promise.resolve(), unsubscribe: () => Promise.resolve() };
  const handler: ConsumeHandler = (_error, _message, done, info) => {
    handled.push(info!.messageId);
    done();
  };
  const subscription = new Subscription(1, "consume", "orders/v1/*", handler, {}, host);
  const links = [link("a"), link("b")];
  const masters = { isMaster: () => true } as unknown as MasterTracker;
  const receiver = new Receiver(new Map([[1, subscription]]), masters, () => links as unknown as HostConnection[], (error) => {
    throw error;
  });
  let tag = 0;
  const body = encode({ n: 1 });
  const deliver = (through: FakeLink, messageId: string) => {
    receiver.receive(through as unknown as HostConnection, { sub: 1, tag: ++tag, messageId, destination: "d1", nbRequeues: 0, body, created: 0 });
    return tag;
  };
  return { handled, links, deliver };
}

describe("Receiver with several brokers", () => {
  it("a message acked through one link and delivered again through another is acked without its handler", () => {
    const { handled, links: [a, b], deliver } = setup();
    deliver(a!, "m1");
    const again = deliver(b!, "m1");
    expect(handled).toEqual(["m1"]);
    expect(b!.acks).toEqual([again]);
    deliver(b!, "m2");
    expect(handled).toEqual(["m1", "m2"]);
  });

  it("a link that reconnected (a new generation) counts as another link", () => {
    const { handled, links: [a], deliver } = setup();
    deliver(a!, "m1");
    a!.generation++;
    deliver(a!, "m1");
    expect(handled).toEqual(["m1"]);
    expect(a!.acks.length).toBe(2);
  });

  it("finds an ack made long after the last change of link, when the link changes again", () => {
    const { handled, links: [a, b], deliver } = setup();
    deliver(a!, "first");
    // More acks through b than it remembers, so b's lookups have long stopped.
    for (let n = 0; n < 25_000; n++) deliver(b!, `b${n}`);
    const again = deliver(a!, "b24999");
    expect(handled.length).toBe(25_001);
    expect(handled.at(-1)).toBe("b24999");
    expect(a!.acks.at(-1)).toBe(again);
    // Older than the 20,000 remembered: handled again (at least once).
    deliver(b!, "first");
    expect(handled.at(-1)).toBe("first");
  });
});
