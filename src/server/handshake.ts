/**
 * Limits on connections that have not proved who they are yet: anyone who can reach the port may
 * open one, so what they can make the broker hold is bounded per connection and for all of them.
 */
import { decode, KittenError } from "../protocol/mod.ts";

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
