/**
 * Seeded fuzz of the broker's connection handling: random and mutated frames go through the REAL
 * `Session` (src/server/session.ts) of a real `Broker`, over a fake `Connection` (the socket seam
 * tcp.ts implements), so millions of inputs run in minutes without sockets.
 *
 *   bun scripts/fuzz.ts --inputs 2000000 --seed 1
 *
 * Inputs: random bytes, valid operations with random or hostile fields (deep nesting, `__proto__`
 * keys, CBOR tags cbor-x knows: dates, bigints, sets, shared references, regexps…), byte-level
 * mutations of valid frames, frames split and glued across reads, every handshake stage, slow
 * readers (partial writes, drains) and timer ticks. Two brokers: without rules (open) and with
 * rules that include exclusive (`!`) grants.
 *
 * Checked on every input: nothing throws out of the session; every frame the broker writes decodes
 * and is a CHALLENGE, WELCOME, PONG, OK, DELIVER or ERROR; every ERROR carries a catalogued code
 * other than INTERNAL; a fatal code closes the connection; the broker logs no error. Checked at the
 * end, after every connection closed: no session, no exclusive claim and no in-flight delivery is
 * left, Object.prototype is untouched, the shared CBOR decoder still decodes maps as objects, and
 * each broker still serves a new client through the whole handshake (hello, challenge, signed
 * auth, consume, send, deliver, ack).
 *
 * Prints one summary line (`fuzz: … OK` or `fuzz: … FAILED`) and exits 1 on any failure.
 * tests/e2e/fuzz_test.ts runs a bounded version in the test suite.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadOrCreateKeys, signHelloToken } from "../src/client/keys.ts";
import { decode, encode, FrameDecoder, isErrorCode, isFatal, OP } from "../src/protocol/mod.ts";
import { Broker } from "../src/server/broker.ts";
import { parseConfig } from "../src/server/config.ts";
import { memoryLogger } from "../src/server/log.ts";
import { type Connection, Session } from "../src/server/session.ts";
import { PROTOCOL_VERSION } from "../src/version.ts";
import { mulberry32 } from "../tests/helpers/random.ts";

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

// ── seeded randomness ────────────────────────────────────────────────────────────────────────

class Rng {
  readonly next: () => number;
  constructor(seed: number) {
    this.next = mulberry32(seed);
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }
  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = this.int(256);
    return out;
  }
}

// ── a CBOR writer that can say anything (cbor-x's encoder only says what JS values mean) ─────

/** A raw CBOR item, spliced as is. */
class Raw {
  constructor(readonly bytes: Uint8Array) {}
}
/** A CBOR map with keys of any type, in order, duplicates allowed. */
class CMap {
  constructor(readonly entries: [unknown, unknown][]) {}
}
class CTag {
  constructor(readonly tag: number, readonly value: unknown) {}
}

/** A growable byte buffer (deeply nested inputs are hundreds of KiB). */
class Out {
  buf = new Uint8Array(256);
  len = 0;
  #reserve(n: number): void {
    if (this.len + n <= this.buf.length) return;
    const next = new Uint8Array(Math.max(this.buf.length * 2, this.len + n));
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
  }
  push(...bytes: number[]): void {
    this.#reserve(bytes.length);
    for (const byte of bytes) this.buf[this.len++] = byte;
  }
  bytes(bytes: Uint8Array): void {
    this.#reserve(bytes.length);
    this.buf.set(bytes, this.len);
    this.len += bytes.length;
  }
}

function head(major: number, n: number, out: Out): void {
  const m = major << 5;
  if (n < 24) out.push(m | n);
  else if (n < 0x100) out.push(m | 24, n);
  else if (n < 0x10000) out.push(m | 25, n >> 8, n & 0xff);
  else if (n < 0x100000000) out.push(m | 26, (n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff);
  else {
    const hi = Math.floor(n / 0x100000000);
    const lo = n >>> 0;
    out.push(m | 27, (hi >>> 24) & 0xff, (hi >>> 16) & 0xff, (hi >>> 8) & 0xff, hi & 0xff);
    out.push((lo >>> 24) & 0xff, (lo >>> 16) & 0xff, (lo >>> 8) & 0xff, lo & 0xff);
  }
}

const textEncoder = new TextEncoder();

function write(value: unknown, out: Out): void {
  if (value instanceof Raw) out.bytes(value.bytes);
  else if (value === null) out.push(0xf6);
  else if (value === undefined) out.push(0xf7);
  else if (value === false) out.push(0xf4);
  else if (value === true) out.push(0xf5);
  else if (typeof value === "number") {
    if (Number.isSafeInteger(value)) head(value >= 0 ? 0 : 1, value >= 0 ? value : -1 - value, out);
    else {
      const view = new DataView(new ArrayBuffer(8));
      view.setFloat64(0, value);
      out.push(0xfb);
      out.bytes(new Uint8Array(view.buffer));
    }
  } else if (typeof value === "string") {
    const bytes = textEncoder.encode(value);
    head(3, bytes.length, out);
    out.bytes(bytes);
  } else if (value instanceof Uint8Array) {
    head(2, value.length, out);
    out.bytes(value);
  } else if (Array.isArray(value)) {
    head(4, value.length, out);
    for (const item of value) write(item, out);
  } else if (value instanceof CMap) {
    head(5, value.entries.length, out);
    for (const [k, v] of value.entries) {
      write(k, out);
      write(v, out);
    }
  } else if (value instanceof CTag) {
    head(6, value.tag, out);
    write(value.value, out);
  } else {
    throw new TypeError(`cannot write ${typeof value}`);
  }
}

function cbor(value: unknown): Uint8Array {
  const out = new Out();
  write(value, out);
  return out.buf.slice(0, out.len);
}

function framed(body: Uint8Array, length = body.length): Uint8Array {
  const out = new Uint8Array(4 + body.length);
  new DataView(out.buffer).setUint32(0, length >>> 0);
  out.set(body, 4);
  return out;
}

// ── inputs ───────────────────────────────────────────────────────────────────────────────────

const CLIENT_OPS = [OP.HELLO, OP.AUTH, OP.SEND, OP.LISTEN, OP.CONSUME, OP.ADD_ID, OP.REMOVE_ID, OP.UNSUBSCRIBE, OP.ACK, OP.NACK, OP.PING];
const OTHER_OPS = [0, OP.CHALLENGE, OP.WELCOME, OP.PONG, OP.OK, OP.ERROR, OP.DELIVER, 5, 16, 99, 255, 65536, 2 ** 32, 2 ** 53 - 1];
const ENDPOINTS = ["a", "x", "e", "__proto__", "constructor", "toString", "*", "", "a/b", "é", "a".repeat(65), "by"];
const VERSIONS = ["v1", "v2", "*", "", "1.0", "v1/x", "__proto__"];
const IDS = ["1", "2", "42", "*", "__proto__", "constructor", "..", "%2F", "", " ", "a/b", "a*", "\u0000", "x".repeat(257), "hasOwnProperty"];
const STRINGS = ["", "x", "fuzz-1", "a/v1/1", "x/v1/1", "e/v1/*", "__proto__", "constructor", "../evil", "broker-1", "\u0000", "é", "x".repeat(300), "eyJhbGciOiJFZERTQSJ9.e30.AA", "-----BEGIN PUBLIC KEY-----"];
const KEYS = ["client", "token", "__proto__", "constructor", "prototype", "nonce", "publicKey", "alg", "toString", "valueOf", "hasOwnProperty"];
const NUMBERS = [0, 1, 2, 3, 7, 23, 24, 255, 256, 65535, 65536, 2 ** 31, 2 ** 32, 2 ** 53 - 1, 2 ** 53, 2 ** 64, -1, -24, -25, -(2 ** 53), 0.5, -0.5, 1e308, NaN, Infinity, -Infinity, 31_536_000, 31_536_001];
/** cbor-x decodes these tags into Dates, bigints, sets, Maps, shared references, Errors, RegExps… */
const TAGS = [0, 1, 2, 3, 4, 5, 14, 15, 21, 25, 27, 28, 29, 51, 64, 72, 81, 105, 256, 258, 259, 0xdffe, 0xdfff, 0xe000, 40, 41, 55799];

function channelName(rng: Rng): string {
  if (rng.chance(0.1)) return rng.pick(STRINGS);
  return `${rng.pick(ENDPOINTS.slice(0, 4))}/${rng.pick(VERSIONS.slice(0, 2))}/${rng.pick(IDS.slice(0, 6))}`;
}

function randomValue(rng: Rng, depth = 0): unknown {
  const roll = rng.int(depth > 3 ? 8 : 13);
  switch (roll) {
    case 0: return rng.pick(NUMBERS);
    case 1: return rng.int(1000);
    case 2: return rng.pick(STRINGS);
    case 3: return rng.pick(IDS);
    case 4: return rng.bytes(rng.int(40));
    case 5: return rng.pick([null, undefined, true, false]);
    case 6: return new Raw(rng.bytes(1 + rng.int(8))); // arbitrary (often invalid) item bytes
    case 7: return new Raw(new Uint8Array([rng.pick([0xf8, 0xfa, 0xf9, 0xff, 0x1f, 0x5f, 0x7f, 0x9f, 0xbf, 0xdf, 0x1c, 0xe0 + rng.int(20)])]));
    case 8: return Array.from({ length: rng.int(5) }, () => randomValue(rng, depth + 1));
    case 9: return new CMap(Array.from({ length: rng.int(4) }, () => [rng.chance(0.8) ? rng.pick(KEYS) : randomValue(rng, depth + 1), randomValue(rng, depth + 1)]));
    case 10: return new CTag(rng.pick(TAGS), randomValue(rng, depth + 1));
    case 11: return deepNesting(rng);
    default: return protoMap(rng);
  }
}

/** `[[[[…]]]]` or `{a:{a:{…}}}` or tag-in-tag, up to 100k deep (rarely: it is big). */
function deepNesting(rng: Rng): Raw {
  const depth = rng.chance(0.02) ? 100_000 : rng.pick([10, 100, 500, 2000]);
  const opener = rng.pick([[0x81], [0xa1, 0x61, 0x61], [0xc6 + rng.int(10)], [0xd8, 28]]);
  const out = new Uint8Array(depth * opener.length + 1);
  for (let i = 0; i < depth; i++) out.set(opener, i * opener.length);
  out[out.length - 1] = 0x01;
  return new Raw(out);
}

/** `{"__proto__": {"polluted": true, …}}` and friends. */
function protoMap(rng: Rng): CMap {
  const inner = new CMap([["polluted", true], ["client", "admin"], ["isAdmin", true]]);
  return new CMap([[rng.pick(["__proto__", "constructor", "prototype"]), rng.chance(0.5) ? inner : new CMap([["prototype", inner]])], ["client", rng.pick(STRINGS)]]);
}

/** A plausible operation: the right shape with, often, one field replaced by something hostile. */
function plausibleOp(rng: Rng, tags: number[], hostile: boolean): unknown[] {
  const op = rng.chance(0.9) ? rng.pick(CLIENT_OPS) : rng.pick(OTHER_OPS);
  const ref = rng.chance(0.9) ? rng.int(50) : rng.pick(NUMBERS);
  const sub = rng.int(6);
  const ids = () => Array.from({ length: 1 + rng.int(3) }, () => rng.pick(IDS.slice(0, 6)));
  let fields: unknown[];
  switch (op) {
    case OP.HELLO:
      fields = [rng.chance(0.8) ? PROTOCOL_VERSION : rng.pick(NUMBERS), rng.chance(0.7) ? new CMap([["client", rng.chance(0.5) ? `fuzz-${rng.int(5)}` : rng.pick(STRINGS)], ["token", rng.chance(0.8) ? null : rng.pick(STRINGS)]]) : randomValue(rng)];
      break;
    case OP.AUTH:
      fields = [new CMap([["token", rng.pick(STRINGS)], ["publicKey", rng.pick(STRINGS)]])];
      break;
    case OP.SEND:
      fields = [ref, channelName(rng), `m-${rng.int(1e6)}`, rng.chance(0.9) ? cbor(rng.pick(STRINGS)) : randomValue(rng)];
      break;
    case OP.LISTEN:
    case OP.CONSUME:
      fields = [ref, sub, rng.pick(ENDPOINTS.slice(0, 4)), rng.pick(VERSIONS.slice(0, 2)), ids(), rng.chance(0.7) ? null : rng.pick(NUMBERS)];
      break;
    case OP.ADD_ID:
    case OP.REMOVE_ID:
      fields = [ref, sub, ids()];
      break;
    case OP.UNSUBSCRIBE:
      fields = [ref, sub];
      break;
    case OP.ACK:
      fields = [sub, Array.from({ length: rng.int(4) }, () => (tags.length > 0 && rng.chance(0.8) ? rng.pick(tags) : rng.pick(NUMBERS)))];
      break;
    case OP.NACK:
      fields = [sub, tags.length > 0 && rng.chance(0.8) ? rng.pick(tags) : rng.pick(NUMBERS), rng.chance(0.7) ? rng.int(3) : rng.pick(NUMBERS)];
      break;
    case OP.PING:
      fields = [ref];
      break;
    default:
      fields = Array.from({ length: rng.int(6) }, () => randomValue(rng));
  }
  if (hostile) {
    const roll = rng.int(10);
    if (roll < 7) fields[rng.int(fields.length + 1)] = randomValue(rng); // one hostile field
    else if (roll < 9) fields.push(...Array.from({ length: 1 + rng.int(3) }, () => randomValue(rng))); // extra ones
    else fields.length = rng.int(fields.length + 1); // missing ones
  }
  return [op, ...fields];
}

function mutate(rng: Rng, bytes: Uint8Array): Uint8Array {
  const out = Array.from(bytes.length > 4096 ? bytes.subarray(0, 4096 + rng.int(bytes.length - 4096)) : bytes);
  const edits = 1 + rng.int(4);
  for (let i = 0; i < edits; i++) {
    const at = rng.int(out.length + 1);
    switch (rng.int(5)) {
      case 0: if (at < out.length) out[at]! ^= 1 << rng.int(8); break;
      case 1: if (at < out.length) out[at] = rng.int(256); break;
      case 2: out.splice(at, 0, rng.int(256)); break;
      case 3: out.splice(at, 1); break;
      default: out.length = at; // truncate
    }
  }
  return new Uint8Array(out);
}

/**
 * One input: the bytes of one or more frames (valid, mutated, random, or with a lying length).
 * `lies` is true when a length prefix does not match its body: the session may then wait for
 * bytes that never come, so such inputs go to a connection of their own.
 */
function makeInput(rng: Rng, tags: number[]): { bytes: Uint8Array; lies: boolean } {
  const frames: Uint8Array[] = [];
  let lies = false;
  const count = rng.chance(0.85) ? 1 : 2 + rng.int(3);
  for (let i = 0; i < count; i++) {
    const roll = rng.int(100);
    let body: Uint8Array;
    if (roll < 75) body = cbor(plausibleOp(rng, tags, rng.chance(0.3)));
    else if (roll < 88) body = mutate(rng, cbor(plausibleOp(rng, tags, false)));
    else if (roll < 95) body = cbor(randomValue(rng));
    else body = rng.bytes(rng.int(64));
    const lie = rng.chance(0.015);
    lies ||= lie;
    frames.push(framed(body, lie ? rng.pick([0, 1, body.length + 1, 0xffffffff, 2 ** 20 + 1, rng.int(2 ** 21)]) : body.length));
  }
  const total = frames.reduce((n, f) => n + f.length, 0);
  const out = new Uint8Array(total);
  let offset = 0;
  for (const f of frames) {
    out.set(f, offset);
    offset += f.length;
  }
  return { bytes: out, lies };
}

// ── the harness ──────────────────────────────────────────────────────────────────────────────

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
  const folders: string[] = [];
  const tempDir = (name: string) => {
    const dir = mkdtempSync(join(tmpdir(), `kitten-fuzz-${name}-`));
    folders.push(dir);
    return dir;
  };
  const protoKeys = Object.getOwnPropertyNames(Object.prototype).sort().join(",");
  const keys = await loadOrCreateKeys(tempDir("keys"), "fuzz");

  let clock = 1_700_000_000_000;
  const makeBroker = (rules: unknown[]) => {
    const logger = memoryLogger(3); // warnings and errors only: refusals log warnings, bugs log errors
    const config = parseConfig({
      isManagementInterface: false,
      registeredClientsPath: tempDir("clients"),
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
  for (const dir of folders) rmSync(dir, { recursive: true, force: true });
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

export function summary(report: FuzzReport): string {
  const codes = Object.entries(report.errorCodes).sort((a, b) => b[1] - a[1]).map(([c, n]) => `${c}=${n}`).join(" ");
  const frames = Object.entries(report.framesOut).sort((a, b) => b[1] - a[1]).map(([c, n]) => `${c}=${n}`).join(" ");
  const status = report.failures.length === 0 ? "OK" : `FAILED (${report.failures.length} failure(s))`;
  return `fuzz: ${report.inputs} inputs, seed ${report.seed}, ${report.sessions} sessions (${report.handshakes} real handshakes), ` +
    `${(report.ms / 1000).toFixed(1)} s; frames out: ${frames}; error codes: ${codes}; ${status}`;
}

function argument(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  if (at < 0) return fallback;
  const value = Number(process.argv[at + 1]);
  if (!Number.isSafeInteger(value) || value < 0) {
    console.error(`--${name} must be a non-negative integer: current value is ${process.argv[at + 1]}`);
    process.exit(2);
  }
  return value;
}

if (import.meta.main) {
  const inputs = argument("inputs", 2_000_000);
  const seed = argument("seed", 1);
  const report = await runSessionFuzz({
    inputs,
    seed,
    maxFailures: 20,
    onProgress: (done) => console.error(`fuzz: ${done}/${inputs} inputs…`),
    progressEvery: 200_000,
  });
  for (const failure of report.failures) console.error(`FAILURE: ${failure}`);
  console.log(summary(report));
  process.exit(report.failures.length === 0 ? 0 : 1);
}
