import { afterEach, expect, it } from "bun:test";
import { Broker } from "../../src/server/broker.ts";
import { parseConfig } from "../../src/server/config/config.ts";
import { memoryLogger } from "../../src/server/log.ts";
import { type Connection, Session } from "../../src/server/session.ts";

const sessions: Session[] = [];
afterEach(() => sessions.splice(0).forEach((session) => session.tearDown())); // clears the grace timer

/** An open session whose socket takes nothing (a peer that does not read); counts pause() calls. */
function stalled(isPeer: boolean): { session: Session; paused: () => number } {
  const broker = new Broker(parseConfig({ durability: "memory", socketServer: { maxOutgoingBytes: 65536 } }), { logger: memoryLogger() });
  let paused = 0;
  const connection: Connection = { write: () => 0, end() {}, pause: () => void paused++, resume() {}, remoteAddress: "test" };
  const session = new Session(broker, connection);
  session.state = "open";
  session.isPeer = isPeer;
  sessions.push(session);
  return { session, paused: () => paused };
}

const FRAMES = new Uint8Array(70_000); // one write past maxOutgoingBytes

it("Session stops reading a client whose unsent bytes pass maxOutgoingBytes", () => {
  const { session, paused } = stalled(false);
  session.pushFramed(FRAMES);
  session.flush();
  expect(session.unsentBytes).toBe(70_000);
  expect(session.readPaused).toBe(true);
  expect(paused()).toBe(1);
});

it("Session keeps reading a cluster peer past maxOutgoingBytes: its replication stream has its own window", () => {
  const { session, paused } = stalled(true);
  session.pushFramed(FRAMES);
  session.flush();
  expect(session.unsentBytes).toBe(70_000);
  expect(session.readPaused).toBe(false);
  expect(paused()).toBe(0);
});
