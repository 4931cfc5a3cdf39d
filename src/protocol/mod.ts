/**
 * @module
 * The wire protocol shared by the client and the broker: frames, operations, channel names and
 * the error catalogue. Pure code: no `Bun` or `Deno` globals, no `node:*`, timers or I/O, so it runs
 * everywhere the client does. The exceptions, not exported here, are `keys.ts`, the key files a
 * client and a broker (towards its peers) keep, and `files.ts`, how such files are created: both
 * use `node:fs`, which Bun, Deno and Node share.
 */
export * from "./errors.ts";
export * from "./frame.ts";
export * from "./ops.ts";
export * from "./peer_ops.ts";
export * from "./move_ops.ts";
export { type Host, parseHost } from "./host.ts";
export * from "./channel.ts";
export { isValidClientId, validateClientId } from "./client_id.ts";
export { decode, encode } from "./cbor.ts";
export { decodeBody } from "./body.ts";
export * from "./hot_ops.ts";
export { RecentMap } from "./recent.ts";
