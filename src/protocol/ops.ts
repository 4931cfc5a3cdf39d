/**
 * Operations of protocol v1. Every frame body is a CBOR array whose first element is the
 * operation code; the positions of the other fields are fixed per operation (PROTOCOL.md).
 * Arrays, not maps: they decode about three times faster and every message pays that cost.
 *
 * `ref` is the correlation id a client chooses for a request; the broker echoes it in `OK` or
 * `ERROR`. `sub` is the subscription (handler) id a client chooses for each listen/consume.
 */
import { validateClientId } from "./client_id.ts";
import { KittenError } from "./errors.ts";

export const OP = {
  // client → broker
  HELLO: 1,
  AUTH: 2,
  SEND: 10,
  LISTEN: 11,
  CONSUME: 12,
  ADD_ID: 13,
  REMOVE_ID: 14,
  UNSUBSCRIBE: 15,
  MAP: 16,
  ACK: 20,
  NACK: 21,
  ACK_MIRROR: 22,
  FENCE: 24,
  PING: 30,
  // broker ↔ broker (peer links, see peer_ops.ts)
  SYNC: 50,
  APPEND: 51,
  REMOVE: 52,
  SYNCED: 53,
  REPL_ACK: 54,
  IN_SYNC: 55,
  RESUME: 56,
  CONFIRMED: 57,
  REQUEUED: 58,
  // source master → target master of a queue move (see move_ops.ts)
  MOVE_BEGIN: 60,
  MOVE_APPEND: 61,
  MOVE_REMOVE: 62,
  MOVE_ACK: 63,
  // broker → client
  CHALLENGE: 3,
  WELCOME: 4,
  ROLE: 5,
  PONG: 31,
  OK: 40,
  ERROR: 41,
  DELIVER: 42,
  MAP_INFO: 43,
} as const;

export type OpCode = (typeof OP)[keyof typeof OP];

/** Options a client states in `hello`. */
export interface HelloOptions {
  /** The client's id (`clientId`): listeners sharing it share one copy of each message. */
  client: string;
  /** The broker token from the host string (`#token`), or null. */
  token: string | null;
  /** Set by a broker connecting to a peer (`cluster.peers`): the link carries replication. */
  peer?: boolean;
}

/** What the broker states in `welcome`. */
export interface WelcomeInfo {
  server: string;
  serviceId: string;
  protocol: number;
  role: "master" | "slave";
  /**
   * Raised each time a broker becomes master (failover). A master whose epoch is below one a
   * client has already seen is an old master that came back: its deliveries are refused.
   */
  epoch: number;
  maxFrameSize: number;
  version: string;
  /**
   * True when this broker takes its master's replication stream (`cluster.peers` set): as a slave
   * it needs no copies of a client's sends and acks, the master streams them. Absent: it does.
   */
  replicates?: boolean;
  /** `cluster.group` of this broker; absent from brokers that predate groups. */
  group?: string;
  /** True when queues are spread over groups (`cluster.etcd`): ask MAP which group owns a queue. */
  map?: boolean;
}

/** What the broker states in `ROLE` (after a promotion, a demotion, a fencing or a reload). */
export interface RoleInfo {
  role: "master" | "slave";
  epoch: number;
  fenced: boolean;
  /** As in welcome; absent from brokers that predate it. */
  replicates?: boolean;
}

export type HelloOp = [typeof OP.HELLO, number, HelloOptions];
/** The broker's challenge: sign `nonce` for audience `serviceId`. */
export interface Challenge {
  nonce: string;
  serviceId: string;
}
/** The client's proof: an EdDSA JWT over the nonce, and the public key to pin on first use. */
export interface AuthProof {
  token: string;
  publicKey: string;
}
export type ChallengeOp = [typeof OP.CHALLENGE, Challenge];
export type AuthOp = [typeof OP.AUTH, AuthProof];
export type SendOp = [typeof OP.SEND, number, string, string, Uint8Array];
export type SubscribeOp = [
  typeof OP.LISTEN | typeof OP.CONSUME,
  number,
  number,
  string,
  string,
  string[],
  number | null,
];
export type IdsOp = [typeof OP.ADD_ID | typeof OP.REMOVE_ID, number, number, string[]];
export type UnsubscribeOp = [typeof OP.UNSUBSCRIBE, number, number];
/** [ACK, sub, delivery tags] */
export type AckOp = [typeof OP.ACK, number, number[]];
/** [NACK, sub, delivery tag, delay in seconds] */
export type NackOp = [typeof OP.NACK, number, number, number];
export type PingOp = [typeof OP.PING, number];
/** [MAP, ref, queues]: which group owns each queue (placing those that have none), and every group's brokers. */
export type MapOp = [typeof OP.MAP, number, string[]];

export type WelcomeOp = [typeof OP.WELCOME, WelcomeInfo];
export type OkOp = [typeof OP.OK, number[]];
export type ErrorOp = [typeof OP.ERROR, number | null, string, string, unknown?];
/** [DELIVER, sub, delivery tag, messageId, destination id, nbRequeues, body, created (ms since epoch)] */
export type DeliverOp = [typeof OP.DELIVER, number, number, string, string, number, Uint8Array, number];
export type PongOp = [typeof OP.PONG, number];

const MAX_ID_LIST = 10_000;
export const MAX_MESSAGE_ID_LENGTH = 128;

function bad(op: string, detail: string): KittenError {
  return new KittenError("BAD_REQUEST", `Cannot read ${op}: ${detail}`);
}

function isUint(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

function isStringList(value: unknown): value is string[] {
  if (!Array.isArray(value) || value.length > MAX_ID_LIST) return false;
  for (const item of value) if (typeof item !== "string") return false;
  return true;
}

function isUintList(value: unknown): value is number[] {
  if (!Array.isArray(value) || value.length > MAX_ID_LIST) return false;
  for (const item of value) if (!isUint(item)) return false;
  return true;
}

/** Returns the operation code of a decoded frame, or throws BAD_FRAME. */
export function opOf(value: unknown): number {
  if (!Array.isArray(value) || !isUint(value[0])) {
    throw new KittenError("BAD_FRAME", "Cannot read frame: body must be an array starting with an operation code");
  }
  return value[0];
}

/** The correlation id of a request, when it has a readable one (used to address an error reply). */
export function refOf(value: unknown[]): number | null {
  // hello, ack and nack expect no answer: their second field is not a ref. Every other request,
  // including operations this broker does not know, carries its ref second.
  const op = value[0];
  if (op === OP.HELLO || op === OP.ACK || op === OP.NACK || op === OP.ACK_MIRROR || op === OP.FENCE || op === OP.REPL_ACK) {
    return null;
  }
  return isUint(value[1]) ? value[1] : null;
}

export function checkHello(v: unknown[]): HelloOp {
  if (!isUint(v[1])) throw new KittenError("BAD_PROTOCOL", "Cannot read hello: protocol version must be an integer");
  const options = v[2] as Partial<HelloOptions> | undefined;
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new KittenError("BAD_PROTOCOL", "Cannot read hello: options must be a map");
  }
  if (typeof options.client !== "string") throw new KittenError("BAD_PROTOCOL", "Cannot read hello: client must be a string");
  validateClientId(options.client); // BAD_CLIENT_ID: the rule the broker pins keys under
  if (options.token !== undefined && options.token !== null && typeof options.token !== "string") {
    throw new KittenError("BAD_PROTOCOL", "Cannot read hello: token must be a string or null");
  }
  if (options.peer !== undefined && typeof options.peer !== "boolean") {
    throw new KittenError("BAD_PROTOCOL", "Cannot read hello: peer must be a boolean");
  }
  return v as HelloOp;
}

export function checkAuth(v: unknown[]): AuthOp {
  const proof = v[1] as Partial<AuthProof> | undefined;
  if (typeof proof !== "object" || proof === null || typeof proof.token !== "string" || proof.token.length > 4096 ||
    typeof proof.publicKey !== "string" || proof.publicKey.length > 4096) {
    throw new KittenError("BAD_PROTOCOL", "Cannot read auth: expected {token, publicKey} strings of at most 4096 characters");
  }
  return v as AuthOp;
}

export function checkSend(v: unknown[]): SendOp {
  if (!isUint(v[1])) throw bad("send", "ref must be an unsigned integer");
  if (typeof v[2] !== "string") throw bad("send", "channel must be a string");
  if (typeof v[3] !== "string" || v[3].length === 0 || v[3].length > MAX_MESSAGE_ID_LENGTH) {
    throw bad("send", `message id must be a string of 1 to ${MAX_MESSAGE_ID_LENGTH} characters`);
  }
  if (!(v[4] instanceof Uint8Array)) throw bad("send", "body must be a byte string");
  return v as SendOp;
}

export function checkSubscribe(v: unknown[]): SubscribeOp {
  const name = v[0] === OP.LISTEN ? "listen" : "consume";
  if (!isUint(v[1])) throw bad(name, "ref must be an unsigned integer");
  if (!isUint(v[2])) throw bad(name, "subscription id must be an unsigned integer");
  if (typeof v[3] !== "string" || typeof v[4] !== "string") throw bad(name, "endpoint and version must be strings");
  if (!isStringList(v[5])) throw bad(name, `ids must be a list of at most ${MAX_ID_LIST} strings`);
  if (v[6] !== undefined && v[6] !== null && !(isUint(v[6]) && v[6] >= 1)) {
    throw bad(name, "prefetch must be a positive integer or null");
  }
  if (v[6] === undefined) v[6] = null;
  return v as SubscribeOp;
}

export function checkIds(v: unknown[]): IdsOp {
  const name = v[0] === OP.ADD_ID ? "addId" : "removeId";
  if (!isUint(v[1])) throw bad(name, "ref must be an unsigned integer");
  if (!isUint(v[2])) throw bad(name, "subscription id must be an unsigned integer");
  if (!isStringList(v[3])) throw bad(name, `ids must be a list of at most ${MAX_ID_LIST} strings`);
  return v as IdsOp;
}

export function checkUnsubscribe(v: unknown[]): UnsubscribeOp {
  if (!isUint(v[1]) || !isUint(v[2])) throw bad("unsubscribe", "ref and subscription id must be unsigned integers");
  return v as UnsubscribeOp;
}

export function checkAck(v: unknown[]): AckOp {
  if (!isUint(v[1])) throw bad("ack", "subscription id must be an unsigned integer");
  if (!isUintList(v[2])) throw bad("ack", "delivery tags must be a list of unsigned integers");
  return v as AckOp;
}

/** The longest nack delay, in seconds (one year); the client caps longer requests to it. */
export const MAX_NACK_DELAY_SECONDS = 31_536_000;

export function checkNack(v: unknown[]): NackOp {
  if (!isUint(v[1])) throw bad("nack", "subscription id must be an unsigned integer");
  if (!isUint(v[2])) throw bad("nack", "delivery tag must be an unsigned integer");
  if (typeof v[3] !== "number" || !(v[3] >= 0) || v[3] > MAX_NACK_DELAY_SECONDS) {
    throw bad("nack", `delay must be a number of seconds between 0 and ${MAX_NACK_DELAY_SECONDS}`);
  }
  return v as NackOp;
}

/** [ACK_MIRROR, kind (0 listen, 1 consume), queue, [destination, messageId, …]]: acks copied to slaves. */
export type AckMirrorOp = [typeof OP.ACK_MIRROR, number, string, string[]];
/** [FENCE, {epoch, master}]: a client tells an old master that a newer one (epoch) exists. */
export type FenceOp = [typeof OP.FENCE, { epoch: number; master: string }];
/** [ROLE, RoleInfo]: the broker's role changed (reload, fencing), or whether it replicates. */
export type RoleOp = [typeof OP.ROLE, RoleInfo];

export function checkAckMirror(v: unknown[]): AckMirrorOp {
  if (v[1] !== 0 && v[1] !== 1) throw bad("ack mirror", "kind must be 0 (listen) or 1 (consume)");
  if (typeof v[2] !== "string") throw bad("ack mirror", "queue must be a string");
  if (!isStringList(v[3]) || v[3].length % 2 !== 0) throw bad("ack mirror", "acks must be [destination, messageId] pairs");
  return v as AckMirrorOp;
}

export function checkFence(v: unknown[]): FenceOp {
  const info = v[1] as { epoch?: unknown; master?: unknown } | undefined;
  if (typeof info !== "object" || info === null || !isUint(info.epoch) || typeof info.master !== "string") {
    throw bad("fence", "expected {epoch, master}");
  }
  return v as FenceOp;
}

/** Queues one MAP request may name. */
export const MAX_MAP_QUEUES = 1000;

export function checkMap(v: unknown[]): MapOp {
  if (!isUint(v[1])) throw bad("map", "ref must be an unsigned integer");
  if (!isStringList(v[2]) || v[2].length > MAX_MAP_QUEUES) throw bad("map", `queues must be a list of at most ${MAX_MAP_QUEUES} strings`);
  return v as MapOp;
}

export function checkPing(v: unknown[]): PingOp {
  if (!isUint(v[1])) throw bad("ping", "ref must be an unsigned integer");
  return v as PingOp;
}

/** Why and where from a dead-lettered message came: the 9th element of its DELIVER frames. */
export interface DeadLetterInfo {
  reason: "requeueLimit" | "overflow" | "ttl";
  /** The channel the message was sent to (`endpoint/version/id`). */
  channel: string;
  messageId: string;
  deliveries: number;
}
