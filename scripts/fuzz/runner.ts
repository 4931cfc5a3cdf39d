/**
 * The runner: feeds the inputs to the REAL `Session` of two real `Broker`s (one open, one with
 * rules) over fake connections, checks every frame the broker writes, and at the end checks that
 * nothing is left behind and that each broker still serves a new client end to end.
 */
import { loadOrCreateKeys, signHelloToken } from "../../src/client/keys.ts";
import { decode, encode, FrameDecoder, isErrorCode, isFatal, OP } from "../../src/protocol/mod.ts";
import { Broker } from "../../src/server/broker.ts";
import { parseConfig } from "../../src/server/config.ts";
import { memoryLogger } from "../../src/server/log.ts";
import { type Connection, Session } from "../../src/server/session.ts";
import { PROTOCOL_VERSION } from "../../src/version.ts";
import { TempDirs } from "../../tests/helpers/temp_dir.ts";
import { CMap, cbor, framed } from "./cbor_writer.ts";
import { makeInput } from "./inputs.ts";
import { Rng } from "./rng.ts";

export interface FuzzOptions {
  inputs: number;
  seed: number;
  /** Stop after this many failures (each failure is kept with its seed and input number). */
  maxFailures?: number;
  /** Called every `progressEvery` inputs (the CLI prints a line). */
  onProgress?: (done: number) => void;
  progressEvery?: number;
}

export interface FuzzReport {
  inputs: number;
  seed: number;
  sessions: number;
  handshakes: number;
  framesOut: Record<string, number>;
  errorCodes: Record<string, number>;
  failures: string[];
  ms: number;
}

const ALLOWED_OUT: Set<number> = new Set([OP.CHALLENGE, OP.WELCOME, OP.PONG, OP.OK, OP.ERROR, OP.DELIVER]);
const OP_NAMES = Object.fromEntries(Object.entries(OP).map(([name, code]) => [code, name]));

interface Peer {
  session: Session;
  connection: Connection & { mode: "all" | "partial" | "none"; ended: boolean };
  /** Frames the broker wrote (decoded), drained by the harness. */
  out: unknown[][];
  decoder: FrameDecoder;
  broker: Broker;
}

export async function runSessionFuzz(options: FuzzOptions): Promise<FuzzReport> {
  const started = performance.now();
  const rng = new Rng(options.seed);
  const maxFailures = options.maxFailures ?? 10;
  const failures: string[] = [];
  const framesOut: Record<string, number> = {};
  const errorCodes: Record<string, number> = {};
  const folders = new TempDirs("kitten-fuzz-");
  const protoKeys = Object.getOwnPropertyNames(Object.prototype).sort().join(",");
  const keys = await loadOrCreateKeys(folders.make("kitten-fuzz-keys-"), "fuzz");

  let clock = 1_700_000_000_000;
  const makeBroker = (rules: unknown[]) => {
    const logger = memoryLogger(3); // warnings and errors only: refusals log warnings, bugs log errors
    const config = parseConfig({
      isManagementInterface: false,
      registeredClientsPath: folders.make("kitten-fuzz-clients-"),
      requeueInterval: 0.5,
      requeueLimit: 3,
      maxItemsInQueue: 50,
      maxMessagesPerQueue: 2000,
      channels: { "a/v1": { listenerPrefetch: 4, prefetch: 2, deadLetter: "x/v2", ttl: 2 } },
      socketServer: { maxFrameSize: 1 << 20, maxOutgoingBytes: 65536 },
      rules,
    });
    return { broker: new Broker(config, { logger, now: () => clock }), logger };
  };
  const brokers = [
    makeBroker([]),
    makeBroker([
      { client: "fuzz-*", read: ["a/*", "!x/v1/*", "e/v1/1"], write: ["a/*", "x/v1/*", "e/*"] },
      { client: "fuzz-0", read: ["!e/*"] },
      { client: "final", read: ["final/*"], write: ["final/*"] },
    ]),
  ];

  let current = "";
  const fail = (what: string) => {
    if (failures.length < maxFailures) failures.push(`${what} (seed ${options.seed}, ${current})`);
  };

  const tags: number[] = [];
  let sessions = 0;
  let handshakes = 0;

  const newPeer = (index: number): Peer => {
    const { broker } = brokers[index]!;
    const peer = {} as Peer;
    const connection = {
      mode: "all" as "all" | "partial" | "none",
      ended: false,
      remoteAddress: "fuzz",
      write(bytes: Uint8Array): number {
        if (connection.ended) return -1;
        const n = connection.mode === "all" ? bytes.length : connection.mode === "none" ? 0 : rng.int(bytes.length + 1);
        accept(peer, bytes.subarray(0, n));
        return n;
      },
      end() {
        connection.ended = true;
      },
    };
    Object.assign(peer, { connection, out: [], decoder: new FrameDecoder(64 << 20), broker, session: new Session(broker, connection) });
    broker.sessions.add(peer.session);
    sessions++;
    return peer;
  };

  /** Every byte the broker writes is checked here, synchronous or not (auth settles later). */
  function accept(peer: Peer, bytes: Uint8Array): void {
    let bodies: Uint8Array[];
    try {
      bodies = peer.decoder.push(bytes.slice());
    } catch (error) {
      return fail(`broker wrote an undecodable frame header: ${(error as Error).message}`);
    }
    for (const body of bodies) {
      let value: unknown;
      try {
        value = decode(body);
      } catch (error) {
        fail(`broker wrote a frame that does not decode: ${(error as Error).message}`);
        continue;
      }
      if (!Array.isArray(value) || !ALLOWED_OUT.has(value[0])) {
        fail(`broker wrote an unexpected frame ${JSON.stringify(value)?.slice(0, 120)}`);
        continue;
      }
      const name = OP_NAMES[value[0]]!;
      framesOut[name] = (framesOut[name] ?? 0) + 1;
      if (value[0] === OP.ERROR) {
        const code = value[2];
        errorCodes[String(code)] = (errorCodes[String(code)] ?? 0) + 1;
        if (!isErrorCode(code)) fail(`ERROR with an uncatalogued code ${JSON.stringify(code)}`);
        else if (code === "INTERNAL") fail(`ERROR INTERNAL: ${value[3]}`);
        if (typeof value[3] !== "string" || value[3].length === 0) fail(`ERROR ${code} without a message`);
      }
      if (value[0] === OP.DELIVER && typeof value[2] === "number") {
        tags.push(value[2]);
        if (tags.length > 64) tags.shift();
      }
      peer.out.push(value);
    }
  }

  /** A session past the handshake. Most skip the crypto (state set directly: the handshake has its own fuzz inputs and e2e tests); some do the real one. */
  async function openPeer(index: number, real: boolean, client = `fuzz-${rng.int(5)}`): Promise<Peer> {
    const peer = newPeer(index);
    if (!real) {
      peer.session.clientId = client;
      peer.session.state = "open";
      return peer;
    }
    peer.session.receive(framed(cbor([OP.HELLO, PROTOCOL_VERSION, new CMap([["client", client], ["token", null]])])));
    peer.broker.flush();
    const challenge = peer.out.find((f) => f[0] === OP.CHALLENGE)?.[1] as { nonce: string; serviceId: string } | undefined;
    if (!challenge) throw new Error(`no challenge for ${client}: ${JSON.stringify(peer.out)}`);
    const token = await signHelloToken({ privateKey: keys.privateKey, clientId: client, audience: challenge.serviceId, nonce: challenge.nonce });
    peer.session.receive(framed(cbor([OP.AUTH, new CMap([["token", token], ["publicKey", keys.publicKeyPem]])])));
    peer.broker.flush();
    for (let i = 0; i < 200 && peer.session.state === "verifying"; i++) await new Promise((r) => setTimeout(r, 0));
    if (peer.session.state !== "open") throw new Error(`handshake of ${client} ended in ${peer.session.state}: ${JSON.stringify(peer.out)}`);
    handshakes++;
    peer.out.length = 0;
    return peer;
  }

  const pools: Peer[][] = [[], []];
  const everyone = new Set<Peer>();
  const checkPeer = (peer: Peer) => {
    const fatal = peer.out.find((f) => f[0] === OP.ERROR && isErrorCode(f[2]) && isFatal(f[2]));
    if (fatal && !(peer.connection.ended && peer.session.isClosed)) fail(`fatal ${fatal[2]} did not close the connection`);
    if (peer.connection.ended && !peer.session.isClosed) fail("connection ended but the session is not closed");
    peer.out.length = 0;
  };
  const checkLogs = () => {
    for (const { logger } of brokers) {
      const errors = logger.lines.filter((line) => line.startsWith("[error"));
      for (const line of errors) fail(`broker logged an error: ${line.slice(0, 300)}`);
      logger.lines.length = 0;
    }
  };

  for (let i = 0; i < options.inputs && failures.length < maxFailures; i++) {
    const index = rng.int(2);
    const broker = brokers[index]!.broker;
    const pool = pools[index]!;
    const { bytes: input, lies } = makeInput(rng, tags);
    current = `input ${i}: ${Buffer.from(input.subarray(0, 96)).toString("hex")}${input.length > 96 ? "…" : ""}`;
    let peer: Peer;
    const stage = lies ? (rng.chance(0.5) ? 0 : 12) : rng.int(100);
    if (lies && stage === 12) {
      peer = await openPeer(index, false); // a connection of its own, hung up below
    } else if (stage < 6) {
      peer = newPeer(index); // before hello
    } else if (stage < 12) {
      peer = newPeer(index); // after hello, at the challenge
      peer.session.receive(framed(cbor([OP.HELLO, PROTOCOL_VERSION, new CMap([["client", `fuzz-${rng.int(5)}`], ["token", null]])])));
      broker.flush();
      peer.out.length = 0;
    } else {
      while (pool.length > 0 && pool[pool.length - 1]!.session.isClosed) pool.pop();
      if (pool.length < 4 || rng.chance(0.01)) {
        peer = await openPeer(index, rng.chance(0.02));
        if (rng.chance(0.1)) peer.connection.mode = rng.chance(0.5) ? "none" : "partial"; // a slow reader
        pool.push(peer);
      } else {
        peer = pool[rng.int(pool.length)]!;
      }
    }
    everyone.add(peer);
    try {
      // Split across one to three reads at random points.
      let offset = 0;
      const cuts = rng.int(3);
      for (let c = 0; c < cuts && offset < input.length; c++) {
        const end = offset + rng.int(input.length - offset + 1);
        peer.session.receive(input.subarray(offset, end));
        broker.flush();
        offset = end;
      }
      peer.session.receive(input.subarray(offset));
      broker.flush();
      if (rng.chance(0.05)) {
        clock += rng.int(1500);
        for (const b of brokers) b.broker.tick();
      }
      if (rng.chance(0.05)) {
        const slow = pool[rng.int(pool.length)] ?? peer;
        slow.connection.mode = rng.chance(0.8) ? "all" : rng.pick(["partial", "none"] as const);
        slow.session.drain();
        broker.flush();
      }
    } catch (error) {
      fail(`threw out of the session: ${(error as Error)?.stack ?? error}`);
    }
    checkPeer(peer);
    for (let p = pool.length - 1; p >= 0; p--) if (pool[p]!.session.isClosed) pool.splice(p, 1);
    if ((lies || (stage < 12 && rng.chance(0.5))) && !peer.session.isClosed) peer.session.closed(); // a peer that hangs up
    if (i % 1000 === 999) {
      await new Promise((r) => setTimeout(r, 0)); // lets pending hello verifications settle
      for (const p of everyone) checkPeer(p);
      for (const p of [...everyone]) if (p.session.isClosed) everyone.delete(p);
      checkLogs();
      const probe = decode(encode({ client: "x" }));
      if (probe instanceof Map || Object.getPrototypeOf(probe) !== Object.prototype) fail("the shared CBOR decoder no longer decodes maps as plain objects");
    }
    if (options.onProgress && i % (options.progressEvery ?? 100_000) === 0 && i > 0) options.onProgress(i);
  }

  // Everyone hangs up: nothing may be left behind.
  await new Promise((r) => setTimeout(r, 20));
  current = `after all ${options.inputs} inputs, every connection closed`;
  for (const peer of everyone) {
    checkPeer(peer);
    peer.session.closed();
  }
  for (const { broker } of brokers) {
    clock += 10_000;
    broker.tick();
    if (broker.sessions.size !== 0) fail(`${broker.sessions.size} sessions left after every connection closed`);
    if (broker.exclusive.size !== 0) fail(`${broker.exclusive.size} exclusive ids still claimed after every connection closed`);
    for (const queue of broker.queues.values()) {
      const depth = queue.depth();
      if (depth.inflight !== 0) fail(`queue ${queue.name} has ${depth.inflight} deliveries in flight with no connection`);
    }
  }
  checkLogs();
  if (Object.getOwnPropertyNames(Object.prototype).sort().join(",") !== protoKeys || ({} as Record<string, unknown>).polluted !== undefined) {
    fail("Object.prototype was modified");
  }

  // Each broker still serves a new client end to end.
  for (const [index, name] of [[0, "open"], [1, "rules"]] as const) {
    current = `final check on the ${name} broker`;
    try {
      const peer = await openPeer(index, true, "final");
      const broker = peer.broker;
      peer.session.receive(framed(cbor([OP.CONSUME, 1, 1, "final", "v1", ["1"], null])));
      peer.session.receive(framed(cbor([OP.SEND, 2, "final/v1/1", `final-${index}`, cbor("still alive")])));
      broker.flush();
      const deliver = peer.out.find((f) => f[0] === OP.DELIVER);
      const oks = peer.out.filter((f) => f[0] === OP.OK).flatMap((f) => f[1] as number[]);
      if (!deliver || !oks.includes(1) || !oks.includes(2)) fail(`no longer serves: ${JSON.stringify(peer.out).slice(0, 300)}`);
      else {
        peer.session.receive(framed(cbor([OP.ACK, 1, [deliver[2]]])));
        broker.flush();
        if (broker.queues.get("final/v1")!.depth().inflight !== 0) fail("the final ack was not applied");
      }
      peer.session.closed();
    } catch (error) {
      fail(`final check failed: ${(error as Error).message}`);
    }
  }
  checkLogs();
  folders.removeAll();
  return {
    inputs: options.inputs,
    seed: options.seed,
    sessions,
    handshakes,
    framesOut,
    errorCodes,
    failures,
    ms: performance.now() - started,
  };
}
