/**
 * The one catalogue of error codes. Every error that crosses the wire, every error the client
 * hands to user code and every error the admin API returns carries one of these codes, so no
 * program ever has to parse a message text.
 *
 * `fatal` errors close the connection after they are sent; the others answer one request and
 * the connection goes on. `retryable` errors say "not now" rather than "never": the same request
 * (for a fatal code, the same connection) may succeed later, unchanged; the client dials again
 * after a retryable fatal code and stops after any other. `resend` is narrower: a broker answers
 * a send with such a code when waiting fixes the refusal (a slave catching up, a broker that
 * stops), so the client keeps the send and sends it again, with the same message id, until it is
 * confirmed or `sendTimeoutMs` has passed; a send refused with any other code is rejected at once
 * (`QUEUE_FULL` and `DISK_FULL` are retryable, but they are the application's to handle). While
 * no broker can confirm a send (CONNECTION_LOST, NOT_MASTER, FENCED: client-side causes, never a
 * broker's answer) the send waits too, and those codes name why in its TIMEOUT.
 * Messages read "Cannot X: why".
 */
export const ERRORS = {
  // Protocol: frames, operations, the connection itself.
  /** The bytes of a frame are not a CBOR value, or not an operation array (a new connection starts clean). */
  BAD_FRAME: { status: 400, fatal: true, retryable: true, resend: false },
  /** A frame's length prefix exceeds the receiver's maximum frame size (a send the client refuses as too large never fits). */
  FRAME_TOO_LARGE: { status: 413, fatal: true, retryable: true, resend: false },
  /** The first frame was not a hello, the protocol version is unsupported, or a hello came twice. */
  BAD_PROTOCOL: { status: 400, fatal: true, retryable: false, resend: false },
  /** An operation is well framed but its fields have the wrong types or values. */
  BAD_REQUEST: { status: 400, fatal: false, retryable: false, resend: false },
  /** The operation code is unknown to this broker (newer client); the connection stays open. */
  UNKNOWN_OP: { status: 400, fatal: false, retryable: false, resend: false },
  /** The broker already holds `socketServer.maxConnections` connections; the client dials again with backoff. */
  TOO_MANY_CONNECTIONS: { status: 503, fatal: true, retryable: true, resend: false },
  /** Unsent bytes stayed over `maxOutgoingBytes` for `slowConsumerGraceMs`: the connection is reset (broker log only). */
  SLOW_CONSUMER: { status: 503, fatal: true, retryable: true, resend: false },
  /** The client was closed by `disconnect()` before the broker settled the request. */
  CLOSED: { status: 499, fatal: false, retryable: false, resend: false },
  /** No link to a broker was open while a send waited: it goes out again on reconnect (client only: a TIMEOUT's cause). */
  CONNECTION_LOST: { status: 503, fatal: false, retryable: true, resend: false },
  /** A bug in the broker; the connection stays open and the broker keeps running. */
  INTERNAL: { status: 500, fatal: false, retryable: false, resend: false },

  // Authentication and access: the handshake, keys, rules.
  /** The broker token (`#token` in the host string) is missing or wrong, or the key proof failed. */
  AUTH_FAILED: { status: 401, fatal: true, retryable: false, resend: false },
  /** The client id is not 1 to 128 of letters, digits, ".", "_", "-" (not starting with "."). */
  BAD_CLIENT_ID: { status: 400, fatal: true, retryable: false, resend: false },
  /** The client's public key differs from the key pinned for its client id (rotation: unpin it first). */
  KEY_MISMATCH: { status: 401, fatal: true, retryable: false, resend: false },
  /** Rules are configured and no rule's `client` matches this new (unpinned) client id. */
  UNKNOWN_CLIENT: { status: 403, fatal: true, retryable: false, resend: false },
  /** The hello token is not signed with EdDSA (`none`, `HS256`, or any other algorithm). */
  BAD_ALGORITHM: { status: 401, fatal: true, retryable: false, resend: false },
  /** The hello token's signature does not verify with the client's (pinned) public key. */
  BAD_SIGNATURE: { status: 401, fatal: true, retryable: false, resend: false },
  /** The hello token's `iss` is not the client id the connection claims. */
  BAD_ISSUER: { status: 401, fatal: true, retryable: false, resend: false },
  /** The hello token's `aud` is not this broker's `serviceId`. */
  BAD_AUDIENCE: { status: 401, fatal: true, retryable: false, resend: false },
  /** The hello token's `exp` has passed. */
  TOKEN_EXPIRED: { status: 401, fatal: true, retryable: false, resend: false },
  /** The hello token was made for another challenge (its nonce is not this connection's): a replay. */
  TOKEN_REPLAYED: { status: 401, fatal: true, retryable: false, resend: false },
  /** A key file is missing its pair, unreadable or not a valid key: the client's pair, or a broker's pinned key. */
  KEY_FILE_ERROR: { status: 500, fatal: true, retryable: false, resend: false },
  /** The client's rules do not allow this read or write. */
  NOT_ALLOWED: { status: 403, fatal: false, retryable: false, resend: false },
  /** An exclusive (`!`) id is owned by another client's registrations until they are gone. */
  EXCLUSIVE_TAKEN: { status: 409, fatal: false, retryable: true, resend: false },

  // Sending and queues.
  /** The channel name does not follow `endpoint/version/id`, or uses `*` where it is refused. */
  BAD_CHANNEL: { status: 400, fatal: false, retryable: false, resend: false },
  /** The message does not match the channel's format (`channels[...].map`). */
  BAD_FORMAT: { status: 422, fatal: false, retryable: false, resend: false },
  /** A bounded queue is full: the broker's queue, or the client's queue of unconfirmed sends. */
  QUEUE_FULL: { status: 503, fatal: false, retryable: true, resend: false },
  /** An operation names a subscription (handler) id that this connection has not registered. */
  UNKNOWN_SUBSCRIPTION: { status: 404, fatal: false, retryable: false, resend: false },
  /** A subscription id is registered twice on one connection. */
  DUPLICATE_SUBSCRIPTION: { status: 409, fatal: false, retryable: false, resend: false },
  /** The broker is stopping (soft-stop): it refuses new connections and new messages; the client resends elsewhere. */
  STOPPING: { status: 503, fatal: false, retryable: true, resend: true },
  /** The durable store cannot accept writes (disk full, read-only, I/O error). */
  STORE_UNAVAILABLE: { status: 503, fatal: false, retryable: true, resend: false },
  /** The data directory's disk has less free space than `minFreeDiskBytes`: durable sends wait for more. */
  DISK_FULL: { status: 507, fatal: false, retryable: true, resend: false },
  /** No broker confirmed a send within the client's `sendTimeoutMs`; the message names the last refusal (client only). */
  TIMEOUT: { status: 504, fatal: false, retryable: true, resend: false },

  // Several brokers.
  /** A broker claims master with an epoch below one already seen: an old master, fenced (client report; a TIMEOUT's cause); its confirmations do not count. */
  FENCED: { status: 409, fatal: false, retryable: false, resend: false },
  /** The brokers the client reaches are slaves: none may confirm a send until one is master (client only: a TIMEOUT's cause). */
  NOT_MASTER: { status: 503, fatal: false, retryable: true, resend: false },
  /** Two brokers claim master with the same epoch: an operator must demote one (client report). */
  TWO_MASTERS: { status: 409, fatal: false, retryable: false, resend: false },
  /** Fewer brokers hold the message than `cluster.minInSyncReplicas` asks for: nothing confirmed, send again later. */
  NOT_ENOUGH_REPLICAS: { status: 503, fatal: false, retryable: true, resend: true },
  /** A promotion was refused: this broker has not caught up with the master (`reload --force` overrides). */
  NOT_IN_SYNC: { status: 409, fatal: false, retryable: true, resend: false },
  /** A broker presented itself as a peer, but its id is not in this broker's `cluster.peers`. */
  NOT_A_PEER: { status: 403, fatal: true, retryable: false, resend: false },
  /** A peer fell too far behind the replication stream; it reconnects and catches up again. */
  REPLICA_TOO_SLOW: { status: 503, fatal: true, retryable: true, resend: false },
  /**
   * Another group of brokers owns the queue (the queue map in etcd): details name it
   * `{queue, group, brokers, epoch}`; a client with an older map takes it and sends there at once.
   */
  NOT_OWNER: { status: 421, fatal: false, retryable: true, resend: false },
  /**
   * The queue is moving to another group and its sends are held for the switch (well under a
   * second): the client keeps the send and sends it again; the owner afterwards answers NOT_OWNER.
   */
  QUEUE_MOVING: { status: 503, fatal: false, retryable: true, resend: true },
  /** A queue move cannot start or go on (no such group, a move of that queue already running…); the message says why. */
  MOVE_REFUSED: { status: 409, fatal: false, retryable: false, resend: false },

  // Configuration.
  /** The broker configuration is invalid; the message lists every problem with its key path. */
  CONFIG_INVALID: { status: 400, fatal: true, retryable: false, resend: false },

  // Admin API and CLI.
  /** Admin API: the queue, message, client key or route named does not exist. */
  NOT_FOUND: { status: 404, fatal: false, retryable: false, resend: false },
  /** Admin API: the bearer token (`admin.token`) is missing or wrong. */
  UNAUTHORIZED: { status: 401, fatal: false, retryable: false, resend: false },
  /** CLI: the command line is wrong (unknown command or flag, missing value); exit code 2. */
  USAGE: { status: 400, fatal: false, retryable: false, resend: false },
  /** CLI: no broker answers on the admin API the config names (not running, wrong config). */
  UNREACHABLE: { status: 503, fatal: false, retryable: true, resend: false },
} as const;

export type ErrorCode = keyof typeof ERRORS;

/** Error value used everywhere in Kitten-MQ: a stable `code` from `ERRORS`, and a readable message. */
export class KittenError extends Error {
  readonly code: ErrorCode;
  /** Optional structured detail (for `BAD_FORMAT`, the list of issues; for config, every problem). */
  readonly details?: unknown;
  constructor(code: ErrorCode, message: string, details?: unknown, options?: ErrorOptions) {
    super(message, options);
    this.name = "KittenError";
    this.code = code;
    if (details !== undefined) this.details = details;
  }
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === "string" && Object.hasOwn(ERRORS, value);
}

export function isFatal(code: ErrorCode): boolean {
  return ERRORS[code].fatal;
}

/** Whether trying again later, unchanged, may succeed (see `retryable` above). */
export function isRetryable(code: ErrorCode): boolean {
  return ERRORS[code].retryable;
}

/** Whether the client keeps a send refused with `code` and sends it again (see `resend` above). */
export function shouldResend(code: ErrorCode): boolean {
  return ERRORS[code].resend;
}
