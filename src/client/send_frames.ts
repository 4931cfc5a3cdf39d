/**
 * What a send puts on the wire: its channel and message checked, the message encoded once, and a
 * SEND frame with a message id unique across clients (a random prefix and a counter). The frame is
 * copied to every broker and written again, unchanged, on every resend: a broker that already
 * holds that id drops the duplicate.
 */
import { FRAME_HEADER_SIZE, FrameBatch, KittenError, parseChannel, textItem, writeSend } from "../protocol/mod.ts";
import { encodeBody } from "../protocol/body_encode.ts";
import type { HostConnection } from "./connection.ts";

/**
 * The size of the buffers a group's SEND frames are views of, some eighty frames of the usual
 * size each: a frame kept keeps its buffer alive (see `SendFrames`).
 */
const FRAMES_BUFFER_BYTES = 16 * 1024;

/**
 * The first id's counter: 36^7, written "10000000", so that every counter has 8 base-36 digits
 * (for 36^8 - 36^7, about 2.7 million million, sends). Ids of equal length sort in send order,
 * and a broker of a cluster indexes its stored messages by id: its index then grows at its end
 * (a sequence of short counters, "z" before "10", would scatter its inserts), and a drained
 * backlog frees the index's pages in the order they were written, which SQLite's incremental
 * vacuum needs to give them back at speed (docs/durability.md, "Disk space coming back").
 */
export const FIRST_ID_COUNTER = 36 ** 7;

/**
 * The sends of one group's client. Each SEND is encoded once, into this group's own buffers, and
 * kept until the send is settled; its bytes are copied into every connection's batch. Sends of
 * one group are settled about in call order, so a buffer is freed soon after its last frame; a
 * group whose sends wait (no master) keeps only buffers of its own sends. A send left waiting
 * between settled ones (refused: PendingSends) is copied out of the buffer it was written in.
 */
export class SendFrames {
  readonly #frames = new FrameBatch(FRAMES_BUFFER_BYTES);
  /** Channel names already checked, each with its CBOR text: senders reuse a handful. */
  readonly #channels = new Map<string, Uint8Array>();
  readonly #idPrefix = randomPrefix();
  /**
   * The next message id as a CBOR text item: the prefix, then the counter's base-36 digits, which
   * `#count()` moves on in place. Making the id a string and encoding it cost a Node client about
   * 0.2 µs per send (base-36 `toString` is slow on V8).
   */
  #id: Uint8Array;
  /** Where the counter's digits start in `#id`. */
  #counterAt: number;

  /** `firstCounter`: the first id's counter (FIRST_ID_COUNTER; a test starts near a carry). */
  constructor(firstCounter = FIRST_ID_COUNTER) {
    const counter = firstCounter.toString(36);
    this.#id = idItem(this.#idPrefix, counter);
    this.#counterAt = this.#id.length - counter.length;
  }

  /** Throws the coded error a send of `data` to `channel` rejects with at once (BAD_CHANNEL, BAD_FORMAT). */
  check(channel: unknown, data: unknown): asserts channel is string {
    if (typeof channel !== "string") {
      throw new KittenError("BAD_CHANNEL", `Cannot send to ${String(channel)}: channel must be a string "endpoint/version/id"`);
    }
    this.#channelItem(channel);
    if (data === undefined || data === null) {
      throw new KittenError("BAD_FORMAT", `Cannot send to "${channel}": the message is ${data}`);
    }
  }

  /** The SEND frame (length prefix included) of `data` to `channel` (checked first), with a new message id. */
  frame(ref: number, channel: string, data: unknown): Uint8Array {
    let body: Uint8Array;
    try {
      body = encodeBody(data); // a view, copied into the frame below
    } catch (error) {
      throw new KittenError("BAD_FORMAT", `Cannot send to "${channel}": cannot encode the message: ${(error as Error).message}`);
    }
    writeSend(this.#frames, ref, this.#channelItem(channel), this.#id, body);
    this.#count();
    return this.#frames.take();
  }

  /** The CBOR text of `channel`, checked (BAD_CHANNEL) and encoded the first time only. */
  #channelItem(channel: string): Uint8Array {
    let item = this.#channels.get(channel);
    if (item === undefined) {
      parseChannel(channel, "Cannot send to");
      if (this.#channels.size >= 10_000) this.#channels.clear();
      item = textItem(channel);
      this.#channels.set(channel, item);
    }
    return item;
  }

  /** Moves the id's counter on by one, digit by digit from the last ("z" carries). */
  #count(): void {
    const id = this.#id;
    for (let i = id.length - 1; i >= this.#counterAt; i--) {
      const digit = id[i]!;
      if (digit === Z) {
        id[i] = ZERO;
        continue;
      }
      id[i] = digit === NINE ? A : digit + 1;
      return;
    }
    // Every digit was "z": one digit more, after some 2.7 million million sends.
    this.#id = idItem(this.#idPrefix, "1" + "0".repeat(id.length - this.#counterAt));
    this.#counterAt = this.#id.length - (id.length - this.#counterAt + 1);
  }
}

const ZERO = 0x30;
const NINE = 0x39;
const A = 0x61;
const Z = 0x7a;

/** A message id (`prefix` and base-36 `counter`, ASCII) as a CBOR text item. */
function idItem(prefix: string, counter: string): Uint8Array {
  return textItem(prefix + counter);
}

/** A frame the broker would refuse would close the link and be resent forever: refuse it here. */
export function checkFrameSize(connection: HostConnection, channel: string, frame: Uint8Array): void {
  const size = frame.length - FRAME_HEADER_SIZE;
  if (size <= connection.maxFrameSize) return;
  throw new KittenError(
    "FRAME_TOO_LARGE",
    `Cannot send to "${channel}": the message takes ${size} bytes, ` +
      `more than the maxFrameSize ${connection.maxFrameSize} of "${connection.host.label}"`,
  );
}

/** 12 random bytes, base64url: message ids are unique across clients without coordination. */
function randomPrefix(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replaceAll("+", "-").replaceAll("/", "_") + ".";
}
