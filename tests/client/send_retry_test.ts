/**
 * Sends ride through refusals that waiting fixes: the client keeps the send, writes it again with
 * the same message id after a backoff, and settles it on the master's confirmation, a refusal
 * waiting does not fix, or `sendTimeoutMs`. Over fake brokers (tests/helpers/fake_broker.ts): no
 * sockets, and the tests wait for what the brokers read, not for time.
 */
import { afterEach, expect, it } from "bun:test";
import { join } from "node:path";
import { Client, type ClientOptions, type KittenError } from "../../mod.ts";
import { rejection, waitFor } from "../helpers/broker.ts";
import { FakeBroker, fakeDial, ok, refuse, slave } from "../helpers/fake_broker.ts";
import { testKeysDirectory } from "../helpers/keys.ts";

const clients: Client[] = [];
afterEach(async () => {
  for (const mq of clients.splice(0)) await mq.disconnect();
});

/** A client of `brokers`, connected to every one of them. */
async function connected(brokers: FakeBroker[], options: Partial<ClientOptions> = {}): Promise<Client> {
  const mq = new Client(fakeDial(brokers));
  mq.on("error", () => {}); // FENCED and the like, reported along the way
  clients.push(mq);
  await mq.connect({
    hosts: brokers.map((broker) => broker.host),
    clientId: "send-retry-tester",
    keysDirectory: testKeysDirectory,
    reconnectDelayMs: 10,
    maxReconnectDelayMs: 20,
    ...options,
  });
  await waitFor(() => mq.status().every((host) => host.connected), 2000, "every fake broker connected");
  return mq;
}

/** The gaps between the SENDs a broker read, in ms. */
const gaps = (broker: FakeBroker) => broker.sends.slice(1).map((send, i) => send.at - broker.sends[i]!.at);

it("send() sends a send refused with NOT_ENOUGH_REPLICAS again, with the same message id and a growing delay, and resolves once the master confirms it", async () => {
  const broker = new FakeBroker(1001);
  broker.answer = (send, index) => (index < 3 ? refuse("NOT_ENOUGH_REPLICAS") : ok())(send, index);
  const mq = await connected([broker]);
  await mq.send("retry/v1/1", { n: 1 });
  expect(broker.sends.length).toBe(4);
  expect(new Set(broker.messageIds).size).toBe(1);
  expect(new Set(broker.sends.map((send) => send.ref)).size).toBe(1);
  // 50 ms doubling, each delay between half its base and its base: never a tight loop.
  const [first, second, third] = gaps(broker);
  expect(first).toBeGreaterThanOrEqual(23);
  expect(second).toBeGreaterThanOrEqual(48);
  expect(third).toBeGreaterThanOrEqual(98);
});

it("send() sends a send refused with STOPPING again and resolves once it is confirmed", async () => {
  const broker = new FakeBroker(1001);
  broker.answer = (send, index) => (index < 2 ? refuse("STOPPING") : ok())(send, index);
  const mq = await connected([broker]);
  await mq.send("retry/v1/2", 2);
  expect(broker.sends.length).toBe(3);
  expect(new Set(broker.messageIds).size).toBe(1);
});

it("send() holds back the sends made while refused ones wait, and writes them all in call order when the backoff ends", async () => {
  const broker = new FakeBroker(1001);
  broker.answer = (send, index) => (index < 2 ? refuse("NOT_ENOUGH_REPLICAS") : ok())(send, index);
  const mq = await connected([broker]);
  const first = mq.send("retry/v1/order", 0);
  await waitFor(() => broker.sends.length === 1, 2000, "the first send refused");
  const later = [mq.send("retry/v1/order", 1), mq.send("retry/v1/order", 2)];
  await Promise.all([first, ...later]);
  // Made during the backoff, the later sends were not refused in turn: they waited, and went out
  // after the resend of the first (refused once more, then confirmed), in call order.
  const a = broker.sends[0]!.messageId;
  const [b, c] = broker.messageIds.slice(3);
  expect(broker.messageIds).toEqual([a, a, a, b!, c!]);
  expect(new Set([a, b, c]).size).toBe(3);
});

it("send() probes with one send per round while the master refuses, however many wait, then sends them all in call order", async () => {
  const broker = new FakeBroker(1001);
  let refusing = true;
  broker.answer = (send, index) => (refusing ? refuse("NOT_ENOUGH_REPLICAS") : ok())(send, index);
  const mq = await connected([broker]);
  const sends = Array.from({ length: 20 }, (_, n) => mq.send("retry/v1/probe", n));
  await waitFor(() => broker.sends.length >= 23, 2000, "three rounds of probes");
  const calls = broker.messageIds.slice(0, 20); // the ids in call order
  expect(broker.messageIds.slice(20, 23)).toEqual([calls[0]!, calls[0]!, calls[0]!]);
  refusing = false;
  await Promise.all(sends);
  const afterProbe = broker.messageIds.slice(broker.messageIds.lastIndexOf(calls[0]!) + 1);
  expect(afterProbe).toEqual(calls.slice(1));
});

it("send() rejects at once a send refused with a code that waiting does not fix", async () => {
  const broker = new FakeBroker(1001);
  const mq = await connected([broker]);
  for (const code of ["BAD_FORMAT", "NOT_ALLOWED", "QUEUE_FULL", "DISK_FULL", "STORE_UNAVAILABLE"] as const) {
    broker.answer = refuse(code);
    const before = broker.sends.length;
    const error = await rejection(mq.send("retry/v1/3", 3));
    expect({ code: error.code, sent: broker.sends.length - before }).toEqual({ code, sent: 1 });
  }
});

it("send() rejects with TIMEOUT, naming the last refusal, a send still refused sendTimeoutMs after the call", async () => {
  const broker = new FakeBroker(1001);
  broker.answer = refuse("NOT_ENOUGH_REPLICAS");
  const mq = await connected([broker], { sendTimeoutMs: 300 });
  const started = performance.now();
  const error = await rejection(mq.send("retry/v1/4", 4));
  expect(performance.now() - started).toBeGreaterThanOrEqual(295);
  expect(error.code).toBe("TIMEOUT");
  expect(error.message).toStartWith(
    'Cannot send to "retry/v1/4": not confirmed within sendTimeoutMs (300 ms); the last refusal was NOT_ENOUGH_REPLICAS: ',
  );
  expect((error.cause as KittenError).code).toBe("NOT_ENOUGH_REPLICAS");
  expect(error.details).toMatchObject({ refusal: "NOT_ENOUGH_REPLICAS" });
  // Sent at about 0, 50, 150 ms (with jitter, as late as 0, 25, 75, 175 and 375): a backoff, not a loop.
  expect(broker.sends.length).toBeGreaterThanOrEqual(3);
  expect(broker.sends.length).toBeLessThanOrEqual(5);
  expect(new Set(broker.messageIds).size).toBe(1);
});

it("send() rejects with TIMEOUT naming NOT_MASTER when only slaves answer, and CONNECTION_LOST when no broker is connected", async () => {
  const a = new FakeBroker(1001, "slave");
  const b = new FakeBroker(1002, "slave");
  a.answer = b.answer = slave();
  const mq = await connected([a, b], { sendTimeoutMs: 100 });
  const notMaster = await rejection(mq.send("retry/v1/5", 5));
  expect(notMaster.code).toBe("TIMEOUT");
  expect(notMaster.details).toMatchObject({ refusal: "NOT_MASTER" });
  expect(notMaster.message).toContain(`NOT_MASTER: Cannot send to "retry/v1/5": no broker connected is master ("${a.host}", "${b.host}" are slaves)`);

  const alone = new FakeBroker(1003);
  const other = await connected([alone], { sendTimeoutMs: 100 });
  alone.accepting = false;
  alone.drop();
  await waitFor(() => !other.isConnected());
  const lost = await rejection(other.send("retry/v1/5", 5));
  expect(lost.details).toMatchObject({ refusal: "CONNECTION_LOST" });
  expect(lost.message).toContain(`CONNECTION_LOST: Cannot send to "retry/v1/5": no broker is connected ("${alone.host}" away)`);
});

// No refusal here, so no hold and no backoff: this covers the replay of every pending send to a
// new link (PendingSends.replay), the one path by which this send goes again.
it("send() sends a send again after a lost connection and resolves with the reconnected broker's confirmation", async () => {
  const broker = new FakeBroker(1001);
  broker.answer = (send, index) => {
    if (index === 0) queueMicrotask(() => broker.drop()); // dies before it answers
    return index === 0 ? null : ok()(send, index);
  };
  const mq = await connected([broker]);
  await mq.send("retry/v1/6", 6);
  expect(broker.sends.length).toBe(2);
  expect(new Set(broker.messageIds).size).toBe(1);
  expect(broker.sends.map((send) => send.link)).toEqual([1, 2]); // once per link: the replay, not a resend

});

it("disconnect() rejects a send waiting for its resend with CLOSED, naming the channel and the last refusal", async () => {
  const broker = new FakeBroker(1001);
  broker.answer = refuse("NOT_ENOUGH_REPLICAS");
  const mq = await connected([broker]);
  const sent = mq.send("retry/v1/7", 7);
  await waitFor(() => broker.sends.length === 1);
  await mq.disconnect();
  const error = await rejection(sent);
  expect(error.code).toBe("CLOSED");
  expect(error.message).toBe('Cannot send to "retry/v1/7": the client was disconnected before a broker confirmed it; it was last refused with NOT_ENOUGH_REPLICAS');
  expect((error.cause as KittenError).code).toBe("NOT_ENOUGH_REPLICAS");
  expect(broker.connected).toBe(0);
});

it("sends waiting for their resend count against maxPendingMessages", async () => {
  const broker = new FakeBroker(1001);
  broker.answer = refuse("NOT_ENOUGH_REPLICAS");
  const mq = await connected([broker], { maxPendingMessages: 2 });
  const waiting = [mq.send("retry/v1/8", 1), mq.send("retry/v1/8", 2)];
  await waitFor(() => broker.sends.length >= 2);
  const full = await rejection(mq.send("retry/v1/8", 3));
  expect(full.code).toBe("QUEUE_FULL");
  expect(full.message).toContain("2 sends await confirmation (maxPendingMessages 2)");
  broker.answer = ok();
  await Promise.all(waiting);
});

it("with several hosts, the master's NOT_ENOUGH_REPLICAS does not reject a send a promoted slave then confirms; resends go to the master only", async () => {
  const a = new FakeBroker(1001, "master", 1);
  const b = new FakeBroker(1002, "slave", 0);
  a.answer = refuse("NOT_ENOUGH_REPLICAS");
  b.answer = slave();
  const mq = await connected([a, b]);
  let settled = "pending";
  const sent = mq.send("retry/v1/9", 9).then(() => (settled = "confirmed"), (error: KittenError) => (settled = error.code));
  await waitFor(() => a.sends.length >= 3, 2000, "refused, and sent again to the master");
  expect(b.sends.length).toBe(1); // the slave stored it; it is not sent the resends
  expect(settled).toBe("pending");

  b.answer = ok();
  const refusedByA = a.sends.length;
  b.setRole("master", 2); // elected: it gets every pending send at once
  await sent;
  expect(settled).toBe("confirmed");
  expect(new Set([...a.messageIds, ...b.messageIds]).size).toBe(1);
  // The confirmation answers the promotion's replay (PendingSends.replay to the new master), which
  // ends the hold: no probe went after it, to the old master (fenced) or to the new one.
  expect(b.sends.length).toBe(2);
  expect(a.sends.length).toBe(refusedByA);
});

it("with several hosts, a slave's refusal does not reject a send the master confirms", async () => {
  const a = new FakeBroker(1001, "master", 1);
  const b = new FakeBroker(1002, "slave", 1);
  a.answer = (send, index) => (index === 0 ? refuse("NOT_ENOUGH_REPLICAS") : ok())(send, index);
  b.answer = refuse("QUEUE_FULL");
  const mq = await connected([a, b]);
  await mq.send("retry/v1/10", 10);
  expect(a.sends.length).toBe(2);
});

it("a send waiting for its resend does not keep the process alive", async () => {
  const script = `
    import { Client } from ${JSON.stringify(join(import.meta.dir, "../../mod.ts"))};
    import { FakeBroker, fakeDial, refuse } from ${JSON.stringify(join(import.meta.dir, "../helpers/fake_broker.ts"))};
    const broker = new FakeBroker(1001);
    broker.answer = refuse("NOT_ENOUGH_REPLICAS");
    const mq = new Client(fakeDial([broker]));
    await mq.connect({ hosts: [broker.host], clientId: "alive", keysDirectory: ${JSON.stringify(testKeysDirectory)} });
    mq.send("alive/v1/1", 1).catch(() => {});
    while (broker.sends.length < 2) await new Promise((resolve) => setTimeout(resolve, 5));
    console.log("refused twice, waiting for a resend");
  `;
  const child = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "inherit" });
  const exited = await Promise.race([child.exited, new Promise((resolve) => setTimeout(resolve, 10_000, "still running"))]);
  if (exited === "still running") child.kill();
  expect(exited).toBe(0);
  expect(await new Response(child.stdout).text()).toContain("refused twice");
}, 15_000);

it("sends held during a refusal, over a lost link: the reconnected master gets each send once, and its confirmation writes none again", async () => {
  const broker = new FakeBroker(1001);
  broker.answer = (send, index) => (index === 0 ? refuse("NOT_ENOUGH_REPLICAS") : ok())(send, index);
  const mq = await connected([broker]);
  const first = mq.send("retry/v1/replay", 0);
  await waitFor(() => broker.sends.length === 1, 2000, "the first send refused");
  const held = Array.from({ length: 5 }, (_, n) => mq.send("retry/v1/replay", n + 1)); // held: the backoff runs
  broker.drop(); // before the backoff ends: the probe, if it comes, finds no master
  await Promise.all([first, ...held]);
  // The new link got every pending send once, in call order; the confirmations that followed
  // ended the hold without writing the held sends again.
  const ids = [...broker.sendsPerId.keys()];
  expect(ids.length).toBe(6);
  expect([...broker.sendsPerId.values()]).toEqual([2, 1, 1, 1, 1, 1]);
  expect(broker.sends.map((send) => [send.link, send.messageId])).toEqual([[1, ids[0]!], ...ids.map((id) => [2, id])]);
});

it("sends held during a refusal, then a slave promoted: the new master gets each send once, and its confirmation writes none again", async () => {
  const a = new FakeBroker(1001, "master", 1);
  const b = new FakeBroker(1002, "slave", 0);
  a.answer = refuse("NOT_ENOUGH_REPLICAS");
  b.answer = slave();
  const mq = await connected([a, b]);
  const first = mq.send("retry/v1/promoted", 0);
  await waitFor(() => a.sends.length === 1 && b.sends.length === 1, 2000, "the first send refused by the master, stored by the slave");
  const held = [mq.send("retry/v1/promoted", 1), mq.send("retry/v1/promoted", 2)]; // held: never written
  b.answer = ok();
  b.setRole("master", 2);
  await Promise.all([first, ...held]);
  const [id0, id1, id2] = [...b.sendsPerId.keys()];
  // Stored as slave, then the promotion's replay: each id once more, none after the confirmations.
  expect(b.messageIds).toEqual([id0!, id0!, id1!, id2!]);
  // The old master (fenced by the higher epoch) was never written the held sends.
  expect(a.messageIds.every((id) => id === id0)).toBe(true);
});

it("a slave's link opening during a refusal gets every pending send, and the hold on the master goes on: one probe per round, then each send to the master once", async () => {
  const a = new FakeBroker(1001, "master", 1);
  const b = new FakeBroker(1002, "slave", 1);
  let refusing = true;
  a.answer = (send, index) => (refusing ? refuse("NOT_ENOUGH_REPLICAS") : ok())(send, index);
  b.answer = slave();
  const mq = await connected([a, b]);
  const first = mq.send("retry/v1/slave-link", 0);
  await waitFor(() => a.sends.length === 1, 2000, "the first send refused");
  const held = [mq.send("retry/v1/slave-link", 1), mq.send("retry/v1/slave-link", 2)];
  b.drop(); // the slave's link comes back while the master still refuses
  await waitFor(() => b.sends.some((send) => send.link === 2) && a.sends.length >= 3, 2000, "the slave's new link, two more probes");
  const [id0, id1, id2] = [...b.sendsPerId.keys()];
  expect(b.sends.map((send) => [send.link, send.messageId])).toEqual([[1, id0!], [2, id0!], [2, id1!], [2, id2!]]);
  expect(new Set(a.messageIds)).toEqual(new Set([id0!])); // probes only: the held sends wait
  refusing = false;
  await Promise.all([first, ...held]);
  // Released to the master only (the slave has them): each once.
  expect(a.messageIds.slice(a.messageIds.lastIndexOf(id0!) + 1)).toEqual([id1!, id2!]);
  expect(b.sends.length).toBe(4);
});

it("send() rejects with TIMEOUT naming FENCED when the only broker connected is an old master", async () => {
  const a = new FakeBroker(1001, "master", 2);
  const b = new FakeBroker(1002, "master", 1); // epoch 1, below a's: fenced
  b.answer = ok(); // its confirmation does not count
  const mq = await connected([a, b], { sendTimeoutMs: 150 });
  a.accepting = false;
  a.drop();
  await waitFor(() => mq.status().every((host) => host.connected === (host.host === b.host)), 2000, "only the fenced master connected");
  const error = await rejection(mq.send("retry/v1/fenced", 1));
  expect(b.sends.length).toBe(1); // it was sent, and confirmed by a broker that does not count
  expect(error.code).toBe("TIMEOUT");
  expect(error.details).toEqual({ refusal: "FENCED", refusals: 0 });
  expect((error.cause as KittenError).code).toBe("FENCED");
  expect(error.message).toBe(
    'Cannot send to "retry/v1/fenced": not confirmed within sendTimeoutMs (150 ms); the last refusal was FENCED: ' +
      `Cannot send to "retry/v1/fenced": "${b.host}" claims master with epoch 1, below epoch 2 of "${a.host}", which is not connected`,
  );
});

it("a probe refused with a code that waiting does not fix fails alone: the sends held behind it go out at once and are confirmed", async () => {
  const broker = new FakeBroker(1001);
  broker.answer = (send, index) => (index === 0 ? refuse("NOT_ENOUGH_REPLICAS") : index === 1 ? refuse("BAD_FORMAT") : ok())(send, index);
  const mq = await connected([broker], { sendTimeoutMs: 2000 }); // held for good, they would fail with TIMEOUT
  const first = rejection(mq.send("retry/v1/probe-fails", 0));
  await waitFor(() => broker.sends.length === 1, 2000, "the first send refused");
  const held = [mq.send("retry/v1/probe-fails", 1), mq.send("retry/v1/probe-fails", 2)];
  expect((await first).code).toBe("BAD_FORMAT");
  await Promise.all(held);
  const [a, b, c] = [...broker.sendsPerId.keys()];
  expect(broker.messageIds).toEqual([a!, a!, b!, c!]); // the probe, then the others, once each
});

it("a probe that times out unanswered starts the next round: after a backoff, the next oldest send probes", async () => {
  const broker = new FakeBroker(1001);
  // The first send is refused, its probe never answered; every later send is confirmed.
  broker.answer = (send, index) => (index === 1 ? null : (index === 0 ? refuse("NOT_ENOUGH_REPLICAS") : ok())(send, index));
  const mq = await connected([broker], { sendTimeoutMs: 500 });
  const started = performance.now();
  let timedOutAt = 0;
  const first = rejection(mq.send("retry/v1/probe-times-out", 0)).then((error) => ((timedOutAt = performance.now()), error));
  await waitFor(() => broker.sends.length === 2, 2000, "the probe, unanswered");
  // The later sends must still be pending when the next round's probe goes (up to 100 ms after
  // the first one's deadline): they are made 300 ms after it. Only time can be waited for here.
  await waitFor(() => performance.now() - started >= 300, 2000, "300 ms after the first send");
  const later = [mq.send("retry/v1/probe-times-out", 1), mq.send("retry/v1/probe-times-out", 2)];
  const error = await first;
  expect(error.code).toBe("TIMEOUT");
  expect(error.details).toEqual({ refusal: "NOT_ENOUGH_REPLICAS", refusals: 1 });
  await Promise.all(later);
  const [a, b, c] = [...broker.sendsPerId.keys()];
  expect(broker.messageIds).toEqual([a!, a!, b!, c!]); // held until the new probe (b) was confirmed
  // A new round: the probe went after a backoff (the second round's: 50 to 100 ms), not at once.
  expect(broker.sends[2]!.at - timedOutAt).toBeGreaterThanOrEqual(45);
});

it("a send held behind a refusal, never written, names the client's last refusal in its TIMEOUT and its CLOSED", async () => {
  const broker = new FakeBroker(1001);
  // Two refusals, then probes go unanswered: when the first send times out, its probe is out and
  // the next round waits 100-200 ms, past the held send's own deadline (a few ms after the first's).
  // With every probe refused, the round running at that moment could probe the held send instead.
  broker.answer = (send, index) => (index < 2 ? refuse("NOT_ENOUGH_REPLICAS")(send, index) : null);
  const mq = await connected([broker], { sendTimeoutMs: 300 });
  mq.send("retry/v1/held", 0).catch(() => {});
  await waitFor(() => broker.sends.length === 1, 2000, "the first send refused");
  const timedOut = await rejection(mq.send("retry/v1/held", 1));
  expect(timedOut.code).toBe("TIMEOUT");
  expect(timedOut.details).toEqual({ refusal: "NOT_ENOUGH_REPLICAS", refusals: 0 }); // never refused itself
  expect(timedOut.message).toStartWith(
    'Cannot send to "retry/v1/held": not confirmed within sendTimeoutMs (300 ms); the last refusal was NOT_ENOUGH_REPLICAS: ',
  );
  expect(new Set(broker.messageIds).size).toBe(1); // held: only the first send's probes were written

  const refusing = new FakeBroker(1002);
  refusing.answer = refuse("NOT_ENOUGH_REPLICAS");
  const other = await connected([refusing]);
  const refused = rejection(other.send("retry/v1/held", 2));
  await waitFor(() => refusing.sends.length === 1, 2000, "the first send refused");
  const held = rejection(other.send("retry/v1/held", 3));
  await other.disconnect();
  const closed = await held;
  expect(refusing.messageIds.length).toBe(1); // never written
  expect(closed.code).toBe("CLOSED");
  expect(closed.message).toBe('Cannot send to "retry/v1/held": the client was disconnected before a broker confirmed it; it was last refused with NOT_ENOUGH_REPLICAS');
  expect((closed.cause as KittenError).code).toBe("NOT_ENOUGH_REPLICAS");
  expect((await refused).code).toBe("CLOSED");
});

it("disconnect() rejects a send held while no master is connected with CLOSED naming why, as TIMEOUT would", async () => {
  const broker = new FakeBroker(1001);
  broker.answer = refuse("NOT_ENOUGH_REPLICAS");
  const mq = await connected([broker]);
  const refused = rejection(mq.send("retry/v1/closed-away", 0));
  await waitFor(() => broker.sends.length === 1, 2000, "the first send refused");
  const held = rejection(mq.send("retry/v1/closed-away", 1));
  broker.accepting = false;
  broker.drop();
  await waitFor(() => !mq.isConnected(), 2000, "the broker away");
  await mq.disconnect();
  for (const error of [await refused, await held]) {
    expect(error.code).toBe("CLOSED");
    expect(error.message).toBe('Cannot send to "retry/v1/closed-away": the client was disconnected before a broker confirmed it; it was last refused with CONNECTION_LOST');
    expect((error.cause as KittenError).message).toBe(`Cannot send to "retry/v1/closed-away": no broker is connected ("${broker.host}" away)`);
  }
});

it("a send made after the sends before it were confirmed times out sendTimeoutMs after its own call, not at the deadline they left armed", async () => {
  const broker = new FakeBroker(1001);
  const mq = await connected([broker], { sendTimeoutMs: 300 });
  const started = performance.now();
  await mq.send("retry/v1/deadline", 0); // confirmed: none pending, its deadline timer still armed
  await waitFor(() => performance.now() - started >= 100, 2000, "100 ms after the first send"); // only time can be waited for
  broker.answer = refuse("NOT_ENOUGH_REPLICAS");
  const called = performance.now();
  const error = await rejection(mq.send("retry/v1/deadline", 1));
  expect(error.code).toBe("TIMEOUT");
  expect(performance.now() - called).toBeGreaterThanOrEqual(295);
});
