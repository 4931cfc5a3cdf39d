import { afterEach, expect, it } from "bun:test";
import { encode, frame, OP } from "../../src/protocol/mod.ts";
import type { Session } from "../../src/server/session.ts";
import { Cleanup, type TestBroker, waitFor } from "../helpers/broker.ts";
import { attacker, bystander } from "../helpers/security.ts";
import { hello, type Wire } from "../helpers/wire.ts";

const cleanup = new Cleanup();
afterEach(cleanup.run);

const MAX_OUTGOING = 65536;
/** One socket read turns into at most about 512 KiB of replies before the session checks again (Bun reads). */
const ONE_READ = 1024 * 1024;

function sessionOf(broker: TestBroker, clientId: string): Session {
  const session = [...broker.broker.sessions].find((s) => s.clientId === clientId);
  if (!session) throw new Error(`no session of ${clientId}`);
  return session as Session;
}

/**
 * Sends PINGs (each answered with a PONG the client does not read) until the broker stops reading
 * the connection, or 3,000,000 were sent. Returns how many were sent.
 */
async function floodPings(wire: Wire, session: Session): Promise<number> {
  const one = frame(encode([OP.PING, 1]));
  const chunk = new Uint8Array(one.length * 8192);
  for (let i = 0; i < 8192; i++) chunk.set(one, i * one.length);
  let sent = 0;
  while (sent < 3_000_000 && !session.readPaused) {
    wire.sendRaw(chunk);
    sent += 8192;
    await new Promise((resolve) => setImmediate(resolve)); // lets the broker (same process) read
  }
  return sent;
}

it("e2e: a client that sends and never reads is no longer read past maxOutgoingBytes, then closed with SLOW_CONSUMER", async () => {
  const broker = cleanup.broker({ socketServer: { maxOutgoingBytes: MAX_OUTGOING, slowConsumerGraceMs: 500 } });
  const other = await bystander(cleanup, broker);
  const wire = await attacker(cleanup, broker);
  await hello(wire, "never-reads");
  const session = sessionOf(broker, "never-reads");
  wire.pause();
  const sent = await floodPings(wire, session);
  expect(session.readPaused).toBe(true);
  expect(sent).toBeLessThan(3_000_000);
  // Replies held for it stay near the bound: the broker stopped reading what would make more.
  expect(session.unsentBytes).toBeGreaterThanOrEqual(MAX_OUTGOING);
  expect(session.unsentBytes).toBeLessThan(MAX_OUTGOING + ONE_READ);
  await waitFor(() => session.isClosed, 5000, "the broker closes it");
  wire.resume(); // a paused socket does not see the reset until it reads
  await wire.closed;
  expect(broker.logger.lines.some((line) => line.includes("client=never-reads") && line.includes("code=SLOW_CONSUMER"))).toBe(true);
  await other.check();
});

it("e2e: a client that reads again within slowConsumerGraceMs is read again and keeps its connection", async () => {
  const broker = cleanup.broker({ socketServer: { maxOutgoingBytes: MAX_OUTGOING, slowConsumerGraceMs: 20_000 } });
  const wire = await attacker(cleanup, broker);
  await hello(wire, "reads-late");
  const session = sessionOf(broker, "reads-late");
  wire.pause();
  const sent = await floodPings(wire, session);
  expect(session.readPaused).toBe(true);
  wire.resume();
  await waitFor(() => !session.readPaused, 5000, "reading resumed");
  wire.send([OP.PING, 99]);
  await waitFor(() => wire.buffered.some((f) => f[0] === OP.PONG && f[1] === 99), 10_000, "PONG 99");
  // Every PING was answered, in order, and nothing was refused.
  expect(wire.buffered.filter((f) => f[0] === OP.PONG).length).toBe(sent + 1);
  expect(wire.buffered.some((f) => f[0] === OP.ERROR)).toBe(false);
  expect(wire.isClosed).toBe(false);
});
