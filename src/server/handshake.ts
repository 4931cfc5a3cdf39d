/**
 * Limits on connections that have not proved who they are yet: anyone who can reach the port may
 * open one, so what they can make the broker hold is bounded per connection and for all of them.
 */
import { checkHello, decode, KittenError, validateClientId } from "../protocol/mod.ts";
import { PROTOCOL_VERSION } from "../version.ts";
import type { Config } from "./config/config.ts";

/**
 * Largest frame accepted before `welcome`. Handshake frames (hello with a client id and token,
 * auth with a signed token and a public key) take a few hundred bytes, so a connection that has
 * not proved who it is cannot make the broker buffer a `maxFrameSize` frame.
 */
export const HANDSHAKE_MAX_FRAME_SIZE = 16 * 1024;

/**
 * Bytes that the connections not yet welcomed hold together (partial handshake frames), shared by
 * every session of one listener and bounded by `socketServer.maxUnauthenticatedBytes`.
 */
export interface HandshakeBudget {
  held: number;
}

/** Decodes a whole frame with the generic decoder; BAD_FRAME when it is not CBOR. */
export function decodeFrame(data: Uint8Array, start: number, end: number): unknown[] {
  try {
    return decode(data.subarray(start, end)) as unknown[];
  } catch (error) {
    throw new KittenError("BAD_FRAME", `Cannot decode frame: ${(error as Error).message}`);
  }
}

/** What a HELLO is checked against. */
export interface HelloHost {
  readonly config: Config;
  readonly stopping: boolean;
  /** A broker of `cluster.peers` or of the queue map. */
  isPeer(clientId: string): boolean;
}

/**
 * Checks a HELLO: the protocol version, the broker token, a broker that is stopping, the client
 * id, and a peer's claim to be one. Returns who says hello; throws the coded refusal.
 */
export function acceptHello(host: HelloHost, value: unknown[]): { client: string; peer: boolean } {
  const [, protocol, options] = checkHello(value);
  if (protocol !== PROTOCOL_VERSION) {
    throw new KittenError(
      "BAD_PROTOCOL",
      `Cannot accept hello: protocol ${protocol} is not supported (this broker speaks ${PROTOCOL_VERSION})`,
    );
  }
  const config = host.config;
  const expected = config.socketServer.token;
  if (expected !== null && options.token !== expected) {
    throw new KittenError("AUTH_FAILED", `Cannot accept client "${options.client}": wrong broker token`);
  }
  if (host.stopping) throw new KittenError("STOPPING", "Cannot accept a connection: the broker is stopping");
  validateClientId(options.client);
  if (options.peer === true && !host.isPeer(options.client)) {
    throw new KittenError("NOT_A_PEER", `Cannot accept peer "${options.client}": it is neither in cluster.peers of "${config.serviceId}" nor a broker of the queue map`);
  }
  return { client: options.client, peer: options.peer === true };
}
