/**
 * The runner: feeds the inputs to the REAL `Session` of two real `Broker`s (one open, one with
 * rules) over fake connections, checks every frame the broker writes, and at the end checks that
 * nothing is left behind and that each broker still serves a new client end to end.
 */
import { type ClientKeys, loadOrCreateKeys, signHelloToken } from "../../src/client/keys.ts";
import { decode, encode, FrameDecoder, isErrorCode, isFatal, OP } from "../../src/protocol/mod.ts";
import { Broker } from "../../src/server/broker.ts";
import { parseConfig } from "../../src/server/config/config.ts";
import { memoryLogger } from "../../src/server/log.ts";
import type { Connection } from "../../src/server/outbox.ts";
import { Session } from "../../src/server/session.ts";
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

/** How much of each write a fake connection takes: all of it, a random part (a slow reader), or nothing. */
type WriteMode = "all" | "partial" | "none";

interface Peer {
  session: Session;
  connection: Connection & { mode: WriteMode; ended: boolean };
  /** Frames the broker wrote (decoded), drained by the harness. */
  out: unknown[][];
  decoder: FrameDecoder;
  broker: Broker;
}

export async function runSessionFuzz(options: FuzzOptions): Promise<FuzzReport> {
  const started = performance.now();
  // Removed however the run ends: an input that throws must not leave kitten-fuzz-* folders.
  const folders = new TempDirs("kitten-fuzz-");
  try {
    const fuzz = await SessionFuzz.start(options, folders);
    const progressEvery = options.progressEvery ?? 100_000;
    for (let i = 0; i < options.inputs && !fuzz.atMaxFailures; i++) {
      await fuzz.runInput(i);
      if (i % 1000 === 999) await fuzz.checkEveryone();
      if (options.onProgress && i % progressEvery === 0 && i > 0) options.onProgress(i);
    }
    await fuzz.hangUpEveryone();
    await fuzz.checkStillServes();
    return fuzz.report(started);
  } finally {
    folders.removeAll();
  }
}

/** Object.prototype's own keys, to check at the end that no input added or removed one. */
function prototypeKeys(): string {
  return Object.getOwnPropertyNames(Object.prototype).sort().join(",");
}

interface FuzzBroker {
  broker: Broker;
  logger: ReturnType<typeof memoryLogger>;
}

/**
 * One fuzz run: the two brokers on a shared fake clock, their peers, the counters and the failures.
 * Every random choice goes through one `Rng`, in a fixed order, so a seed replays the same run.
 */
class SessionFuzz {
  readonly #options: FuzzOptions;
  readonly #rng: Rng;
  readonly #maxFailures: number;
  readonly #folders: TempDirs;
  readonly #protoKeys: string;
  readonly #keys: ClientKeys;
  readonly #failures: string[] = [];
  readonly #framesOut: Record<string, number> = {};
  readonly #errorCodes: Record<string, number> = {};
  #clock = 1_700_000_000_000;
  readonly #brokers: FuzzBroker[];
  /** What runs now, named in failures: the input (hex), or the final checks. */
  #current = "";
  /** The latest DELIVER tags, for inputs that ack or nack real deliveries. */
  readonly #tags: number[] = [];
  #sessions = 0;
  #handshakes = 0;
  /** Open peers reused across inputs, one pool per broker. */
  readonly #pools: Peer[][] = [[], []];
  readonly #everyone = new Set<Peer>();

  /** `folders` belongs to the caller, which removes it however the run ends. */
  static async start(options: FuzzOptions, folders: TempDirs): Promise<SessionFuzz> {
    const protoKeys = prototypeKeys();
    const keys = await loadOrCreateKeys(folders.make("kitten-fuzz-keys-"), "fuzz");
    return new SessionFuzz(options, { folders, protoKeys, keys });
  }

  constructor(options: FuzzOptions, setup: { folders: TempDirs; protoKeys: string; keys: ClientKeys }) {
    this.#options = options;
    this.#rng = new Rng(options.seed);
    this.#maxFailures = options.maxFailures ?? 10;
    this.#folders = setup.folders;
    this.#protoKeys = setup.protoKeys;
    this.#keys = setup.keys;
    this.#brokers = [
      this.#makeBroker([]),
      this.#makeBroker([
        { client: "fuzz-*", read: ["a/*", "!x/v1/*", "e/v1/1"], write: ["a/*", "x/v1/*", "e/*"] },
        { client: "fuzz-0", read: ["!e/*"] },
        { client: "final", read: ["final/*"], write: ["final/*"] },
      ]),
    ];
  }

  get atMaxFailures(): boolean {
    return this.#failures.length >= this.#maxFailures;
  }

  #makeBroker(rules: unknown[]): FuzzBroker {
    const logger = memoryLogger(3); // warnings and errors only: refusals log warnings, bugs log errors
    const config = parseConfig({
      isManagementInterface: false,
      registeredClientsPath: this.#folders.make("kitten-fuzz-clients-"),
      requeueInterval: 0.5,
      requeueLimit: 3,
      maxItemsInQueue: 50,
      maxMessagesPerQueue: 2000,
      channels: { "a/v1": { listenerPrefetch: 4, prefetch: 2, deadLetter: "x/v2", ttl: 2 } },
      socketServer: { maxFrameSize: 1 << 20, maxOutgoingBytes: 65536 },
      rules,
    });
    return { broker: new Broker(config, { logger, now: () => this.#clock }), logger };
  }

  #fail(what: string): void {
    if (this.atMaxFailures) return;
    this.#failures.push(`${what} (seed ${this.#options.seed}, ${this.#current})`);
  }

  /** One input, sent by a peer at a random stage of its connection. */
  async runInput(i: number): Promise<void> {
    const rng = this.#rng;
    const index = rng.int(2);
    const { bytes: input, lies } = makeInput(rng, this.#tags);
    const hex = Buffer.from(input.subarray(0, 96)).toString("hex");
    this.#current = `input ${i}: ${hex}${input.length > 96 ? "…" : ""}`;
    const stage = lies ? (rng.chance(0.5) ? 0 : 12) : rng.int(100);
    const peer = await this.#peerAt(index, stage, lies);
    this.#everyone.add(peer);
    const pool = this.#pools[index]!;
    this.#feed(peer, input, pool);
    this.#checkPeer(peer);
    for (let p = pool.length - 1; p >= 0; p--) if (pool[p]!.session.isClosed) pool.splice(p, 1);
    if ((lies || (stage < 12 && rng.chance(0.5))) && !peer.session.isClosed) peer.session.tearDown(); // a peer that hangs up
  }

  /** The peer that sends the input: stage 0–5 before hello, 6–11 at the challenge, 12 and up past the handshake. */
  async #peerAt(index: number, stage: number, lies: boolean): Promise<Peer> {
    if (lies && stage === 12) return await this.#openPeer(index, false); // a connection of its own, hung up after
    if (stage < 6) return this.#newPeer(index); // before hello
    if (stage < 12) return this.#peerAtChallenge(index);
    return await this.#pooledPeer(index);
  }

  /** A new peer that said hello and has not answered the challenge. */
  #peerAtChallenge(index: number): Peer {
    const peer = this.#newPeer(index);
    this.#sayHello(peer, `fuzz-${this.#rng.int(5)}`);
    peer.out.length = 0;
    return peer;
  }

  /** A peer of the pool, or a new one (sometimes a slow reader) while the pool is small. */
  async #pooledPeer(index: number): Promise<Peer> {
    const rng = this.#rng;
    const pool = this.#pools[index]!;
    while (pool.length > 0 && pool[pool.length - 1]!.session.isClosed) pool.pop();
    if (pool.length < 4 || rng.chance(0.01)) {
      const peer = await this.#openPeer(index, rng.chance(0.02));
      if (rng.chance(0.1)) peer.connection.mode = rng.chance(0.5) ? "none" : "partial"; // a slow reader
      pool.push(peer);
      return peer;
    }
    return pool[rng.int(pool.length)]!;
  }

  /** Sends `input` to `peer`, sometimes advancing the clock or draining a slow reader of `pool`. */
  #feed(peer: Peer, input: Uint8Array, pool: Peer[]): void {
    const rng = this.#rng;
    try {
      this.#receiveSplit(peer, input);
      if (rng.chance(0.05)) {
        this.#clock += rng.int(1500);
        for (const b of this.#brokers) b.broker.tick();
      }
      if (rng.chance(0.05)) {
        const slow = pool[rng.int(pool.length)] ?? peer;
        slow.connection.mode = rng.chance(0.8) ? "all" : rng.pick(["partial", "none"] as const);
        slow.session.drain();
        peer.broker.flush();
      }
    } catch (error) {
      this.#fail(`threw out of the session: ${(error as Error)?.stack ?? error}`);
    }
  }

  /** Split across one to three reads at random points. */
  #receiveSplit(peer: Peer, input: Uint8Array): void {
    const rng = this.#rng;
    let offset = 0;
    const cuts = rng.int(3);
    for (let c = 0; c < cuts && offset < input.length; c++) {
      const end = offset + rng.int(input.length - offset + 1);
      peer.session.receive(input.subarray(offset, end));
      peer.broker.flush();
      offset = end;
    }
    peer.session.receive(input.subarray(offset));
    peer.broker.flush();
  }

  #newPeer(index: number): Peer {
    const { broker } = this.#brokers[index]!;
    const rng = this.#rng;
    const peer = {} as Peer;
    const connection = {
      mode: "all" as WriteMode,
      ended: false,
      remoteAddress: "fuzz",
      write: (bytes: Uint8Array): number => {
        if (connection.ended) return -1;
        const n = connection.mode === "all" ? bytes.length : connection.mode === "none" ? 0 : rng.int(bytes.length + 1);
        this.#accept(peer, bytes.subarray(0, n));
        return n;
      },
      end() {
        connection.ended = true;
      },
    };
    Object.assign(peer, { connection, out: [], decoder: new FrameDecoder(64 << 20), broker, session: new Session(broker, connection) });
    broker.attach(peer.session);
    this.#sessions++;
    return peer;
  }

  #sayHello(peer: Peer, client: string): void {
    peer.session.receive(framed(cbor([OP.HELLO, PROTOCOL_VERSION, new CMap([["client", client], ["token", null]])])));
    peer.broker.flush();
  }

  /** A session past the handshake. Most skip the crypto (state set directly: the handshake has its own fuzz inputs and e2e tests); some do the real one. */
  async #openPeer(index: number, real: boolean, client = `fuzz-${this.#rng.int(5)}`): Promise<Peer> {
    const peer = this.#newPeer(index);
    if (!real) {
      peer.session.clientId = client;
      peer.session.state = "open";
      return peer;
    }
    this.#sayHello(peer, client);
    const challenge = peer.out.find((f) => f[0] === OP.CHALLENGE)?.[1] as { nonce: string; serviceId: string } | undefined;
    if (!challenge) throw new Error(`no challenge for ${client}: ${JSON.stringify(peer.out)}`);
    const token = await signHelloToken({ privateKey: this.#keys.privateKey, clientId: client, audience: challenge.serviceId, nonce: challenge.nonce });
    peer.session.receive(framed(cbor([OP.AUTH, new CMap([["token", token], ["publicKey", this.#keys.publicKeyPem]])])));
    peer.broker.flush();
    for (let i = 0; i < 200 && peer.session.state === "verifying"; i++) await new Promise((r) => setTimeout(r, 0));
    if (peer.session.state !== "open") throw new Error(`handshake of ${client} ended in ${peer.session.state}: ${JSON.stringify(peer.out)}`);
    this.#handshakes++;
    peer.out.length = 0;
    return peer;
  }

  /** Every byte the broker writes is checked here, synchronous or not (auth settles later). */
  #accept(peer: Peer, bytes: Uint8Array): void {
    let bodies: Uint8Array[];
    try {
      bodies = peer.decoder.push(bytes.slice());
    } catch (error) {
      return this.#fail(`broker wrote an undecodable frame header: ${(error as Error).message}`);
    }
    for (const body of bodies) {
      const value = this.#decodeOut(body);
      if (value === undefined) continue;
      this.#count(value);
      peer.out.push(value);
    }
  }

  /** The operation the broker wrote, or undefined (and a failure) when it is not one it may write. */
  #decodeOut(body: Uint8Array): unknown[] | undefined {
    let value: unknown;
    try {
      value = decode(body);
    } catch (error) {
      this.#fail(`broker wrote a frame that does not decode: ${(error as Error).message}`);
      return undefined;
    }
    if (!Array.isArray(value) || !ALLOWED_OUT.has(value[0])) {
      this.#fail(`broker wrote an unexpected frame ${JSON.stringify(value)?.slice(0, 120)}`);
      return undefined;
    }
    return value;
  }

  /** Counts the frame by op and error code, checks ERROR frames, and keeps DELIVER tags for later inputs. */
  #count(value: unknown[]): void {
    const name = OP_NAMES[value[0] as number]!;
    this.#framesOut[name] = (this.#framesOut[name] ?? 0) + 1;
    if (value[0] === OP.ERROR) {
      const code = value[2];
      this.#errorCodes[String(code)] = (this.#errorCodes[String(code)] ?? 0) + 1;
      if (!isErrorCode(code)) this.#fail(`ERROR with an uncatalogued code ${JSON.stringify(code)}`);
      else if (code === "INTERNAL") this.#fail(`ERROR INTERNAL: ${value[3]}`);
      if (typeof value[3] !== "string" || value[3].length === 0) this.#fail(`ERROR ${code} without a message`);
    }
    if (value[0] === OP.DELIVER && typeof value[2] === "number") {
      this.#tags.push(value[2]);
      if (this.#tags.length > 64) this.#tags.shift();
    }
  }

  #checkPeer(peer: Peer): void {
    const fatal = peer.out.find((f) => f[0] === OP.ERROR && isErrorCode(f[2]) && isFatal(f[2]));
    if (fatal && !(peer.connection.ended && peer.session.isClosed)) this.#fail(`fatal ${fatal[2]} did not close the connection`);
    if (peer.connection.ended && !peer.session.isClosed) this.#fail("connection ended but the session is not closed");
    peer.out.length = 0;
  }

  #checkLogs(): void {
    for (const { logger } of this.#brokers) {
      const errors = logger.lines.filter((line) => line.startsWith("[error"));
      for (const line of errors) this.#fail(`broker logged an error: ${line.slice(0, 300)}`);
      logger.lines.length = 0;
    }
  }

  /** Every so many inputs: every peer, the logs and the shared CBOR decoder. */
  async checkEveryone(): Promise<void> {
    await new Promise((r) => setTimeout(r, 0)); // lets pending hello verifications settle
    for (const p of this.#everyone) this.#checkPeer(p);
    for (const p of [...this.#everyone]) if (p.session.isClosed) this.#everyone.delete(p);
    this.#checkLogs();
    const probe = decode(encode({ client: "x" }));
    if (probe instanceof Map || Object.getPrototypeOf(probe) !== Object.prototype) this.#fail("the shared CBOR decoder no longer decodes maps as plain objects");
  }

  /** Everyone hangs up: nothing may be left behind. */
  async hangUpEveryone(): Promise<void> {
    await new Promise((r) => setTimeout(r, 20));
    this.#current = `after all ${this.#options.inputs} inputs, every connection closed`;
    for (const peer of this.#everyone) {
      this.#checkPeer(peer);
      peer.session.tearDown();
    }
    for (const { broker } of this.#brokers) {
      this.#clock += 10_000;
      broker.tick();
      this.#checkNothingLeft(broker);
    }
    this.#checkLogs();
    if (prototypeKeys() !== this.#protoKeys || ({} as Record<string, unknown>).polluted !== undefined) {
      this.#fail("Object.prototype was modified");
    }
  }

  #checkNothingLeft(broker: Broker): void {
    if (broker.sessions.size !== 0) this.#fail(`${broker.sessions.size} sessions left after every connection closed`);
    if (broker.exclusive.size !== 0) this.#fail(`${broker.exclusive.size} exclusive ids still claimed after every connection closed`);
    for (const queue of broker.queues.values()) {
      const depth = queue.depth();
      if (depth.inflight !== 0) this.#fail(`queue ${queue.name} has ${depth.inflight} deliveries in flight with no connection`);
    }
  }

  /** Each broker still serves a new client end to end. */
  async checkStillServes(): Promise<void> {
    for (const [index, name] of [[0, "open"], [1, "rules"]] as const) {
      this.#current = `final check on the ${name} broker`;
      try {
        await this.#checkServes(index);
      } catch (error) {
        this.#fail(`final check failed: ${(error as Error).message}`);
      }
    }
    this.#checkLogs();
  }

  /** A real handshake, then consume, send, deliver and ack. */
  async #checkServes(index: number): Promise<void> {
    const peer = await this.#openPeer(index, true, "final");
    const broker = peer.broker;
    peer.session.receive(framed(cbor([OP.CONSUME, 1, 1, "final", "v1", ["1"], null])));
    peer.session.receive(framed(cbor([OP.SEND, 2, "final/v1/1", `final-${index}`, cbor("still alive")])));
    broker.flush();
    const deliver = peer.out.find((f) => f[0] === OP.DELIVER);
    const oks = peer.out.filter((f) => f[0] === OP.OK).flatMap((f) => f[1] as number[]);
    if (!deliver || !oks.includes(1) || !oks.includes(2)) this.#fail(`no longer serves: ${JSON.stringify(peer.out).slice(0, 300)}`);
    else {
      peer.session.receive(framed(cbor([OP.ACK, 1, [deliver[2]]])));
      broker.flush();
      if (broker.queues.get("final/v1")!.depth().inflight !== 0) this.#fail("the final ack was not applied");
    }
    peer.session.tearDown();
  }

  /** The run's report; `started` is the run's performance.now(). */
  report(started: number): FuzzReport {
    return {
      inputs: this.#options.inputs,
      seed: this.#options.seed,
      sessions: this.#sessions,
      handshakes: this.#handshakes,
      framesOut: this.#framesOut,
      errorCodes: this.#errorCodes,
      failures: this.#failures,
      ms: performance.now() - started,
    };
  }
}
