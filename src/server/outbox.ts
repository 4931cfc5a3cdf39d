/**
 * The outgoing side of one connection: frames are gathered into one batch per burst and written
 * in one socket write; what the socket does not take waits for `drain`. Past `maxOutgoingBytes`
 * unsent the socket is not read (replies to what a client sends count too, so a client that never
 * reads cannot make the broker queue PONGs and OKs without bound), and a client still not reading
 * after `slowConsumerGraceMs` is reset with SLOW_CONSUMER.
 */
import { encode, FrameBatch, writeOk } from "../protocol/mod.ts";
import type { Config } from "./config/config.ts";

/** The socket side of a session (Bun's socket in tcp.ts; a fake in unit tests). */
export interface Connection {
  /** Writes what it can and returns the number of bytes accepted (-1 or 0 when closed/full). */
  write(bytes: Uint8Array): number;
  /** Closes after pending bytes are sent. */
  end(): void;
  readonly remoteAddress: string;
  /** Stops reading from the socket (the peer then meets TCP backpressure) until `resume()`. */
  pause?(): void;
  resume?(): void;
  /** Closes at once, dropping what is not sent (a reset). */
  terminate?(): void;
}

export interface OutboxOwner {
  readonly config: Config;
  /** A peer broker's replication stream has its own window (and REPLICA_TOO_SLOW): never paused here. */
  readonly isPeer: boolean;
  /** The client did not read for `slowConsumerGraceMs`: the connection is to be reset. */
  slowConsumer(unsentBytes: number): void;
}

export class Outbox {
  // Small at first: thousands of idle connections must not each hold a large buffer; it doubles as needed.
  readonly batch = new FrameBatch(1024);
  #okRefs: number[] = [];
  #unsent: Uint8Array[] = [];
  #unsentBytes = 0;
  /** Set while the socket is not read because the client does not read what it gets. */
  #slowTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(readonly connection: Connection, readonly owner: OutboxOwner) {}

  /** Bytes written to the socket buffer-side but not yet accepted by the kernel. */
  get unsentBytes(): number {
    return this.#unsentBytes;
  }

  /** Unsent bytes plus the batch being filled. */
  get pendingBytes(): number {
    return this.#unsentBytes + this.batch.byteLength;
  }

  /** True while the socket is not read because the client does not read what it gets. */
  get readPaused(): boolean {
    return this.#slowTimer !== null;
  }

  push(op: unknown[]): void {
    this.batch.push(encode(op));
  }

  /** Confirms a request; confirmations of one burst go out as one OK frame. */
  confirm(ref: number): void {
    this.#okRefs.push(ref);
  }

  /** Writes the batch (and the burst's confirmations) to the socket. False when there was nothing. */
  write(slave: boolean): boolean {
    if (this.#okRefs.length > 0) {
      // A slave's confirmation says "stored as slave": only the master's settles a send.
      writeOk(this.batch, this.#okRefs, slave);
      this.#okRefs = [];
    }
    if (this.batch.byteLength === 0) return false;
    // Written from the batch's own buffer: #send copies only what the socket does not take.
    this.#send(this.batch.view());
    this.batch.clear();
    return true;
  }

  /** The socket can take more: sends what waited. True once nothing waits. */
  drain(): boolean {
    while (this.#unsent.length > 0) {
      const bytes = this.#unsent[0]!;
      const written = Math.max(this.connection.write(bytes), 0);
      this.#unsentBytes -= written;
      if (written < bytes.length) {
        this.#unsent[0] = bytes.subarray(written);
        return false;
      }
      this.#unsent.shift();
    }
    if (this.#slowTimer !== null && this.#unsentBytes < this.owner.config.socketServer.maxOutgoingBytes) this.#resumeReading();
    return true;
  }

  /** Drops everything unsent and stops the slow-consumer timer (the connection is going). */
  discard(): void {
    this.#unsent = [];
    this.#unsentBytes = 0;
    this.batch.clear();
    this.stopTimer();
  }

  stopTimer(): void {
    if (this.#slowTimer !== null) clearTimeout(this.#slowTimer);
    this.#slowTimer = null;
  }

  /** Writes `bytes` (a view the caller reuses): what the socket does not take is copied to wait for drain. */
  #send(bytes: Uint8Array): void {
    if (this.#unsent.length === 0) {
      const written = Math.max(this.connection.write(bytes), 0);
      if (written >= bytes.length) return;
      bytes = bytes.subarray(written);
    }
    this.#unsent.push(bytes.slice());
    this.#unsentBytes += bytes.length;
    if (this.#slowTimer === null && !this.owner.isPeer && this.#unsentBytes >= this.owner.config.socketServer.maxOutgoingBytes) {
      this.#stopReading();
    }
  }

  #stopReading(): void {
    this.connection.pause?.();
    this.#slowTimer = setTimeout(this.#slowConsumer, this.owner.config.socketServer.slowConsumerGraceMs);
  }

  #resumeReading(): void {
    this.stopTimer();
    this.connection.resume?.();
  }

  readonly #slowConsumer = (): void => {
    this.#slowTimer = null;
    this.owner.slowConsumer(this.#unsentBytes);
  };
}
