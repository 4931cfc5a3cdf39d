/**
 * The client id rule, shared by the broker (which pins keys under `<clientId>.pub`) and the client
 * (which checks it at `connect()`, so a bad id fails at once instead of at every handshake).
 *
 * Letters, digits, ".", "_", "-"; 1 to 128; not starting with "." (no "..", no hidden files, and
 * no clash with the registry's own temp files). No "/" or "\\": an id can never leave the folder.
 * On a case-insensitive filesystem `Alice` and `alice` share one file, so one pin: that fails
 * closed (KEY_MISMATCH for the second key), never open.
 */
import { KittenError } from "./errors.ts";

const CLIENT_ID = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;

export function isValidClientId(id: unknown): id is string {
  return typeof id === "string" && CLIENT_ID.test(id);
}

/** Throws BAD_CLIENT_ID unless `id` is a valid client id. */
export function validateClientId(id: unknown): asserts id is string {
  if (!isValidClientId(id)) {
    const shown = typeof id === "string" ? JSON.stringify(id.length > 60 ? `${id.slice(0, 57)}...` : id) : typeof id;
    throw new KittenError(
      "BAD_CLIENT_ID",
      `Cannot use client id ${shown}: it must be 1 to 128 of letters, digits, ".", "_", "-", not starting with "."`,
    );
  }
}
