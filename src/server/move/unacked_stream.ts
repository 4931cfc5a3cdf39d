/**
 * What a queue move's source streamed and the target has not acknowledged yet, kept as written
 * (frames, length prefixes included, in chunks of one write each), so that it can be written
 * again to the target group's next master when the target's link ends (outgoing.ts): a MOVE_ACK
 * says every entry up to it is held by the target and its in-sync replicas, so the next master
 * holds those, and lacks at most what follows. Bounded by the move's window while it streams
 * the snapshot; the queue's live entries come on top.
 */
import { Deque } from "../internal/deque.ts";

interface Chunk {
  /** The last entry (seq) the chunk holds. */
  through: number;
  bytes: Uint8Array;
}

export class UnackedStream {
  readonly #chunks = new Deque<Chunk>();
  #bytes = 0;

  /** Bytes kept. */
  get bytes(): number {
    return this.#bytes;
  }

  /** Frames just written, holding entries up to `through`. */
  push(through: number, bytes: Uint8Array): void {
    this.#chunks.push({ through, bytes });
    this.#bytes += bytes.length;
  }

  /** Everything up to `seq` is held by the target: its chunks go. */
  acknowledge(seq: number): void {
    for (let oldest = this.#chunks.peek(); oldest !== undefined && oldest.through <= seq; oldest = this.#chunks.peek()) {
      this.#chunks.shift();
      this.#bytes -= oldest.bytes.length;
    }
  }

  /** The chunks kept, oldest first: each holds an entry not acknowledged (and maybe some that are). */
  *chunks(): Generator<Uint8Array> {
    for (const chunk of this.#chunks) yield chunk.bytes;
  }

  clear(): void {
    this.#chunks.clear();
    this.#bytes = 0;
  }
}
