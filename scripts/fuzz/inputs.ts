/**
 * The hostile inputs: random and hostile CBOR values (deep nesting, `__proto__` keys, tags cbor-x
 * turns into objects), plausible operations with a field replaced, byte-level mutations, and
 * `makeInput()`, which glues one or more such frames, some with a lying length prefix.
 */
import { OP } from "../../src/protocol/mod.ts";
import { PROTOCOL_VERSION } from "../../src/version.ts";
import { CMap, CTag, cbor, framed, Raw } from "./cbor_writer.ts";
import type { Rng } from "./rng.ts";

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
export function makeInput(rng: Rng, tags: number[]): { bytes: Uint8Array; lies: boolean } {
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
