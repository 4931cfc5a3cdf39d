/**
 * What the broker needs of a connection: who it is, what it may do, where its deliveries go,
 * and how to tell it about the broker's role. `Session` is the one implementation; the broker
 * depends on this type only, so sessions depend on the broker and never the reverse.
 */
import type { DeliverySink } from "./queue/message.ts";
import type { ClientGrants } from "./security/rules.ts";

/**
 * hello → (challenge sent) auth → (token being verified) verifying → open → closed. Nothing
 * but the next handshake step is accepted before `open`.
 */
export type SessionState = "hello" | "auth" | "verifying" | "open" | "closed";

export interface Peer extends DeliverySink {
  /** The client id its hello named ("" before hello). */
  readonly clientId: string;
  /** Where the connection is in its handshake (the admin API lists it). */
  readonly state: SessionState;
  /** Bytes written but not yet taken by the socket (the admin API lists it). */
  readonly unsentBytes: number;
  /** What this client may read and write under the rules in force. */
  readonly grants: ClientGrants;
  /** Writes the frames waiting for this connection (called once per burst, see `Broker.flush()`). */
  flush(): void;
  /** Tells the client the broker's role and epoch (after a promotion, demotion or fencing). */
  announceRole(): void;
  /** Tells the client the broker is stopping: it keeps its sends for the next broker. */
  announceStopping(): void;
  /** Owners of these queues changed in the queue map. */
  announceMap(queues: string[]): void;
  /** Fills every free prefetch slot of this connection's registrations (the broker became master). */
  pumpAll(): void;
}
