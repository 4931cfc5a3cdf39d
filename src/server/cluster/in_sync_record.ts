/**
 * The master's in-sync set as an election reads it (etcd, through `publish`). A slave that dropped
 * out of the set could still be elected while the record names it, so while a changed set is being
 * written (`recording`) the master confirms nothing; a slave that joined is told it is in sync only
 * once the record names it. Without a record to keep (manual failover), a change counts as
 * recorded at once.
 */
export type PublishInSyncSet = (members: string[]) => Promise<void> | void;

export class InSyncRecord {
  /** True while a changed set is being written: nothing is confirmed meanwhile. */
  recording = false;
  /** The set last written (members joined by commas), to write only changes. */
  #written = "";
  /** The last write failed: `retry()` writes again. */
  #failed = false;

  constructor(
    readonly publish: PublishInSyncSet | undefined,
    readonly log: (message: string) => void,
    /** The set `members` is recorded (or needs no record): confirmations may go on. */
    readonly recorded: (members: string[]) => void,
  ) {}

  /** The set is `members` now (the master first): written when it changed, then `recorded`. */
  changed(members: string[]): void {
    const key = members.join(",");
    if (key === this.#written || !this.publish) return this.recorded(members);
    this.recording = true;
    const done = () => {
      this.recording = false;
      this.#written = key;
      this.recorded(members);
    };
    let written: Promise<void> | void;
    try {
      written = this.publish(members);
    } catch (error) {
      this.log(`cannot record the in-sync set ${key}: ${(error as Error).message}`);
      this.#failed = true;
      return;
    }
    if (!(written instanceof Promise)) return done();
    written.then(done, (error) => {
      this.log(`cannot record the in-sync set ${key}: ${(error as Error).message}`);
      this.#failed = true; // retried at the next tick; a lost leadership steps this broker down meanwhile
    });
  }

  /** After a failed write, writes the set (as it is now) again. */
  retry(members: () => string[]): void {
    if (!this.#failed) return;
    this.#failed = false;
    this.recording = false;
    this.changed(members());
  }

  /** The next change is written whatever was written before (a new term: the record may be another master's). */
  forget(): void {
    this.#written = "";
  }
}
