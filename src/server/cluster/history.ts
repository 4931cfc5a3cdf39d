/**
 * Which master wrote which stretch of the replication log. Every entry of the stream has a
 * position `(epoch, index)`: indexes rise by one per entry across masters (a new master goes on
 * from the last index it holds), and each epoch has exactly one master, so an entry is named by
 * its index and the epoch that wrote it. A broker keeps, per epoch, the first index that epoch
 * wrote (Kafka's leader-epoch cache, KIP-101); two brokers whose tables agree on the epoch of an
 * index hold the same entries up to it (Raft's log matching: a slave only ever appends a master's
 * entries in order, from a point where the two agreed).
 */

/** `[epoch, first index it wrote]`, epochs and indexes rising. */
export type EpochStart = [epoch: number, start: number];

/** A broker's place in the log: what a slave sends when it asks to catch up. */
export interface LogPosition {
  /** The epoch table of the history it holds. */
  history: EpochStart[];
  /** The last index it holds. */
  index: number;
  /**
   * The lowest index it can go back to: entries after it can be undone (a slave keeps them in
   * memory), entries up to it cannot. Equal to `index` after a restart.
   */
  floor: number;
}

/** How many epochs a table keeps: older ones only matter to a slave that is that far behind. */
const MAX_EPOCHS = 1_000;

export class EpochHistory {
  #epochs: EpochStart[];

  constructor(epochs: readonly EpochStart[] = []) {
    this.#epochs = epochs.map(([epoch, start]) => [epoch, start]);
  }

  get epochs(): EpochStart[] {
    return this.#epochs.map(([epoch, start]) => [epoch, start]);
  }

  /** The newest epoch in the table (0: none). */
  get lastEpoch(): number {
    return this.#epochs.at(-1)?.[0] ?? 0;
  }

  /**
   * `epoch` writes from `start` on. Epochs that started after `start` are gone (the broker went
   * back to `start - 1`), so they go too. An epoch that wrote nothing stays: a slave may name it.
   */
  begin(epoch: number, start: number): void {
    while (this.#epochs.length > 0) {
      const [lastEpoch, lastStart] = this.#epochs.at(-1)!;
      if (lastEpoch < epoch && lastStart <= start) break;
      this.#epochs.pop();
    }
    this.#epochs.push([epoch, start]);
    if (this.#epochs.length > MAX_EPOCHS) this.#epochs.shift();
  }

  /** Takes another broker's table as its own (after a snapshot or a resume from it). */
  adopt(epochs: readonly EpochStart[]): void {
    this.#epochs = epochs.map(([epoch, start]) => [epoch, start]);
  }

  /** The last index `epoch` wrote, given that this broker's log ends at `last`; null when the table has no such epoch. */
  endOf(epoch: number, last: number): number | null {
    const at = this.#epochs.findIndex(([e]) => e === epoch);
    if (at < 0) return null;
    const next = this.#epochs[at + 1];
    return next === undefined ? last : next[1] - 1;
  }
}

/**
 * The last index two histories hold alike: the highest `d`, at most both logs' ends, whose epoch
 * is the same in both tables. Null when they share no epoch (nothing is known to agree). Two
 * empty tables agree up to the shorter log (entries of no epoch: a log nobody led yet).
 */
export function commonPrefix(
  mine: EpochHistory,
  myLast: number,
  theirs: readonly EpochStart[],
  theirLast: number,
): number | null {
  const upTo = Math.min(myLast, theirLast);
  if (theirs.length === 0 && mine.lastEpoch === 0) return upTo;
  // From their newest epoch back: the first one this broker also had ends where either's does.
  for (let i = theirs.length - 1; i >= 0; i--) {
    const [epoch, start] = theirs[i]!;
    const theirEnd = i + 1 < theirs.length ? theirs[i + 1]![1] - 1 : theirLast;
    const myEnd = mine.endOf(epoch, myLast);
    if (myEnd === null) continue;
    const end = Math.min(theirEnd, myEnd, upTo);
    if (end >= start - 1) return end;
  }
  return null;
}
