/**
 * The journal's file format (journal.ts): frames of entries, each frame written by one write.
 *
 * A file is a sequence of frames:
 *
 *   frame      = length u32 | crc32 of the entries u32 | entries (`length` bytes)
 *   entry      = GENERATION | APPEND | REMOVE
 *   GENERATION = 3 u8 | generation f64           (v7: the first entry of every frame)
 *   APPEND     = 1 u8 | seq f64 | created f64 | deliveries u32 | notBefore f64
 *                | id str | queue str | destination str | deadLetter str (length 0xFFFFFFFF: none) | body bytes
 *   REMOVE     = 2 u8 | seq f64
 *   str        = byte length u32 | UTF-8 ;  bytes = length u32 | bytes   (all little-endian)
 *
 * Files are recycled, not truncated: when writing moves back to a file, it is written over from
 * its start, so that it keeps its size and a commit's fsync writes data only (no change of the
 * file's size for the file system to journal as well). Each turn gives the file a new generation,
 * higher than every earlier one, and every frame carries it: the file's generation is its first
 * frame's, and a frame of another generation is what an earlier turn left past the end of this
 * one. Format-6 files have no GENERATION entry: their frames are generation 0.
 *
 * Reading back (at open) takes every APPEND of both files and drops those a REMOVE names,
 * wherever it is (a message appended to one file may be removed in the other; positions are never
 * reused, so the order of the files does not matter). A file is read up to its first frame whose
 * length or checksum is wrong, or whose generation is not the file's, and cut there: a frame is
 * written by one write, so only a crash of the machine can leave one torn, and a torn frame was
 * never fsynced, so none of its appends was confirmed. The database's meta value
 * `journal_through` is the last position a settle covered: entries at or below it are in the
 * database already (a crash between a settle's commit and its file being emptied leaves them).
 */
import { readFileSync } from "node:fs";
import { deadLetterColumn, decodeDeadLetter } from "./record.ts";
import type { StoredMessage } from "./store.ts";

const APPEND = 1;
const REMOVE = 2;
const GENERATION = 3;
const NO_DEAD_LETTER = 0xffffffff;
const FRAME_HEAD = 8;
/** Fixed bytes of an APPEND (type, seq, created, deliveries, notBefore, five lengths). */
const APPEND_FIXED = 1 + 8 + 8 + 4 + 8 + 5 * 4;
const REMOVE_BYTES = 1 + 8;
const GENERATION_BYTES = 1 + 8;

/** What one journal file holds. */
export interface FileRead {
  appends: Map<number, StoredMessage>;
  removes: number[];
  /** Bytes of whole frames of the file's generation: what follows (torn, or an earlier turn's) is cut off. */
  validBytes: number;
  fileBytes: number;
  /** The generation of its first frame (0: none, or a format-6 file). */
  generation: number;
}

/** Reads one journal file (missing: empty). */
export function readJournalFile(path: string): FileRead {
  const read: FileRead = { appends: new Map(), removes: [], validBytes: 0, fileBytes: 0, generation: 0 };
  let data: Uint8Array;
  try {
    data = readFileSync(path);
  } catch (error) {
    if ((error as { code?: string }).code === "ENOENT") return read;
    throw error;
  }
  read.fileBytes = data.length;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const decoder = new TextDecoder();
  let at = 0;
  while (at + FRAME_HEAD <= data.length) {
    const length = view.getUint32(at, true);
    const start = at + FRAME_HEAD;
    const end = start + length;
    if (end > data.length || Bun.hash.crc32(data.subarray(start, end)) !== view.getUint32(at + 4, true)) break;
    let p = start;
    let generation = 0;
    if (length >= GENERATION_BYTES && data[p] === GENERATION) {
      generation = view.getFloat64(p + 1, true);
      p += GENERATION_BYTES;
    }
    if (at === 0) read.generation = generation;
    else if (generation !== read.generation) break; // left by an earlier turn past this one's end
    const str = (): string => {
      const n = view.getUint32(p, true);
      const s = decoder.decode(data.subarray(p + 4, p + 4 + n));
      p += 4 + n;
      return s;
    };
    while (p < end) {
      const type = data[p]!;
      const seq = view.getFloat64(p + 1, true);
      if (type === REMOVE) {
        read.removes.push(seq);
        p += REMOVE_BYTES;
        continue;
      }
      if (type !== APPEND) throw new Error(`journal "${path}": unknown entry type ${type} at byte ${p}`);
      const created = view.getFloat64(p + 9, true);
      const deliveries = view.getUint32(p + 17, true);
      const notBefore = view.getFloat64(p + 21, true);
      p += 29;
      const id = str();
      const queue = str();
      const destination = str();
      let deadLetter = null;
      if (view.getUint32(p, true) === NO_DEAD_LETTER) p += 4;
      else deadLetter = decodeDeadLetter(seq, str());
      const bodyLength = view.getUint32(p, true);
      // A copy: the message outlives this read, the file's buffer should not.
      const body = data.slice(p + 4, p + 4 + bodyLength);
      p += 4 + bodyLength;
      read.appends.set(seq, { id, queue, destination, created, body, deliveries, deadLetter, notBefore, position: seq });
    }
    at = end;
  }
  read.validBytes = at;
  return read;
}

/** Encodes frames into one buffer, reused and grown as needed. */
export class FrameEncoder {
  #buffer = Buffer.allocUnsafe(1024 * 1024);
  #view = new DataView(this.#buffer.buffer, this.#buffer.byteOffset, this.#buffer.byteLength);

  /** The frame of one commit to a file of `generation`: the appends, then the removes, in the reused buffer. */
  encode(appends: ReadonlyMap<number, StoredMessage>, removes: readonly number[], generation: number): Uint8Array {
    // An upper bound: a string's UTF-8 takes at most 3 bytes per UTF-16 unit.
    let bound = FRAME_HEAD + GENERATION_BYTES + removes.length * REMOVE_BYTES;
    for (const message of appends.values()) {
      const strings = message.id.length + message.queue.length + message.destination.length;
      bound += APPEND_FIXED + message.body.length + 3 * strings + (message.deadLetter ? 3 * deadLetterColumn(message)!.length : 0);
    }
    if (this.#buffer.length < bound) {
      this.#buffer = Buffer.allocUnsafe(Math.max(bound, this.#buffer.length * 2));
      this.#view = new DataView(this.#buffer.buffer, this.#buffer.byteOffset, this.#buffer.byteLength);
    }
    const buffer = this.#buffer;
    const view = this.#view;
    buffer[FRAME_HEAD] = GENERATION;
    view.setFloat64(FRAME_HEAD + 1, generation, true);
    let at = FRAME_HEAD + GENERATION_BYTES;
    for (const [seq, message] of appends) {
      buffer[at] = APPEND;
      view.setFloat64(at + 1, seq, true);
      view.setFloat64(at + 9, message.created, true);
      view.setUint32(at + 17, message.deliveries ?? 0, true);
      view.setFloat64(at + 21, message.notBefore ?? 0, true);
      at = this.#string(message.id, at + 29);
      at = this.#string(message.queue, at);
      at = this.#string(message.destination, at);
      if (message.deadLetter) at = this.#string(deadLetterColumn(message)!, at);
      else {
        view.setUint32(at, NO_DEAD_LETTER, true);
        at += 4;
      }
      const body = message.body;
      view.setUint32(at, body.length, true);
      buffer.set(body, at + 4);
      at += 4 + body.length;
    }
    for (const seq of removes) {
      buffer[at] = REMOVE;
      view.setFloat64(at + 1, seq, true);
      at += REMOVE_BYTES;
    }
    view.setUint32(0, at - FRAME_HEAD, true);
    view.setUint32(4, Bun.hash.crc32(buffer.subarray(FRAME_HEAD, at)), true);
    return buffer.subarray(0, at);
  }

  /** Writes `value` (length, UTF-8) at `at`; returns where it ends. Ids and names are nearly always ASCII: copied as is. */
  #string(value: string, at: number): number {
    const buffer = this.#buffer;
    const start = at + 4;
    const length = value.length;
    let i = 0;
    for (; i < length; i++) {
      const code = value.charCodeAt(i);
      if (code >= 0x80) break;
      buffer[start + i] = code;
    }
    const written = i === length ? length : buffer.write(value, start, "utf8");
    this.#view.setUint32(at, written, true);
    return start + written;
  }
}
