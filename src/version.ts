/**
 * The three version numbers of Kitten-MQ.
 *
 * `VERSION` is the product version (kept equal to package.json and deno.json; a test checks it).
 * `PROTOCOL_VERSION` changes only when the wire format breaks; `STORE_VERSION` only when the
 * on-disk format does. Each bump gets an "Upgrading" entry in CHANGELOG.md.
 */
export const VERSION = "1.0.0-beta.1";
export const PROTOCOL_VERSION = 1;
export const STORE_VERSION = 7;
