/**
 * The disk-space floor (`minFreeDiskBytes`): while the disk holding the data directory has less
 * free space than it, sends to durable queues are refused with DISK_FULL, so that the store never
 * meets a full disk in the middle of a commit (acks, which free space, still go through).
 *
 * statfs costs a system call: it is read at most once per `CHECK_MS` (the broker's tick asks),
 * which is far quicker than a disk fills at the store's write rate.
 */
import { statfsSync } from "node:fs";
import { KittenError } from "../../protocol/errors.ts";

const CHECK_MS = 1000;

export class DiskFloor {
  /** Free bytes at the last check (available to the broker's user), or null when unknown. */
  free: number | null = null;
  #checkedAt = -Infinity;

  constructor(
    readonly directory: string,
    readonly minFreeBytes: () => number,
    readonly now: () => number = Date.now,
    /** Reads the free bytes (tests inject a disk that fills). */
    readonly readFree: (directory: string) => number = freeBytes,
  ) {
    this.refresh(true);
  }

  /** True while free space is below the floor. */
  get low(): boolean {
    return this.free !== null && this.free < this.minFreeBytes();
  }

  /** Reads the free space again when the last reading is older than `CHECK_MS` (or when forced). */
  refresh(force = false): void {
    const now = this.now();
    if (!force && now - this.#checkedAt < CHECK_MS) return;
    this.#checkedAt = now;
    try {
      this.free = this.readFree(this.directory);
    } catch {
      this.free = null; // a directory not created yet or gone: the store reports its own errors
    }
  }

  refusal(channel: string): KittenError {
    return new KittenError(
      "DISK_FULL",
      `Cannot send to "${channel}": the disk of the data directory "${this.directory}" has ${this.free} bytes free, ` +
        `below minFreeDiskBytes (${this.minFreeBytes()})`,
    );
  }
}

/** Bytes free on the disk of `directory` for the broker's user (statfs). */
export function freeBytes(directory: string): number {
  const stats = statfsSync(directory);
  return Number(stats.bavail) * Number(stats.bsize);
}
