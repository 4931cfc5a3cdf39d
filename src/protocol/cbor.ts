/**
 * The only file that imports the CBOR library. Everything else calls `encode`/`decode`.
 *
 * The options turn off the cbor-x extensions (records, structured clone, bundled strings) so
 * that what crosses the wire is plain RFC 8949 CBOR that any language can read.
 */
import { Decoder, Encoder } from "cbor-x";

const options = {
  useRecords: false,
  structuredClone: false,
  bundleStrings: false,
  mapsAsObjects: true,
  tagUint8Array: false,
  // Integers above 2^32 (timestamps in ms) decode as numbers, not BigInt.
  int64AsNumber: true,
} as const;
// Untrusted maps cannot pollute prototypes: cbor-x renames a "__proto__" key to "__proto_"
// (tested in tests/protocol/cbor_test.ts). Deep nesting throws a RangeError, which callers
// turn into BAD_FRAME like any other decode failure.

const encoder = new Encoder(options);
const decoder = new Decoder(options);

/** Encodes a value as CBOR. The result is a fresh buffer the caller owns. */
export function encode(value: unknown): Uint8Array {
  return encoder.encode(value);
}

/**
 * Decodes one CBOR value. Throws on malformed input. Byte strings in the result are views into
 * `bytes`: copy (`slice()`) any that must outlive the buffer.
 */
export function decode(bytes: Uint8Array): unknown {
  return decoder.decode(bytes);
}
