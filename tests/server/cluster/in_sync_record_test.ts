/**
 * The in-sync set as an election reads it (cluster/in_sync_record.ts): written on change only,
 * nothing confirmed while a write runs or after one failed, and a failed write tried again.
 */
import { describe, expect, it } from "bun:test";
import { InSyncRecord, type PublishInSyncSet } from "../../../src/server/cluster/in_sync_record.ts";

function record(publish: PublishInSyncSet | undefined) {
  const logs: string[] = [];
  const recorded: string[][] = [];
  const isr = new InSyncRecord(publish, (message) => logs.push(message), (members) => recorded.push(members));
  return { isr, logs, recorded };
}

describe("InSyncRecord", () => {
  it("with no record to keep (manual failover), a change counts as recorded at once", () => {
    const { isr, recorded } = record(undefined);
    isr.changed(["m", "s1"]);
    expect(isr.recording).toBe(false);
    expect(recorded).toEqual([["m", "s1"]]);
  });

  it("writes a changed set once, and confirms nothing while the write runs", async () => {
    const written: string[][] = [];
    let release = () => {};
    const { isr, recorded } = record((members) => {
      written.push(members);
      return new Promise<void>((resolve) => (release = resolve));
    });
    isr.changed(["m", "s1"]);
    expect(isr.recording).toBe(true);
    expect(recorded).toEqual([]);
    release();
    await Promise.resolve();
    expect(isr.recording).toBe(false);
    expect(recorded).toEqual([["m", "s1"]]);

    isr.changed(["m", "s1"]); // the same set: not written again
    expect(written).toEqual([["m", "s1"]]);
    expect(recorded).toEqual([["m", "s1"], ["m", "s1"]]);
    isr.forget(); // a new term: the record may be another master's
    isr.changed(["m", "s1"]);
    expect(written).toEqual([["m", "s1"], ["m", "s1"]]);
  });

  for (const how of ["rejects", "throws"] as const) {
    it(`a write that ${how} is logged, holds confirmations back, and is tried again with the set as it is then`, async () => {
      const written: string[][] = [];
      let fail = true;
      const { isr, logs, recorded } = record((members) => {
        written.push(members);
        if (!fail) return Promise.resolve();
        if (how === "throws") throw new Error("etcd unreachable");
        return Promise.reject(new Error("etcd unreachable"));
      });
      isr.changed(["m"]);
      await Promise.resolve();
      expect(logs).toEqual(["cannot record the in-sync set m: etcd unreachable"]);
      expect(isr.recording).toBe(true);
      expect(recorded).toEqual([]);

      fail = false;
      isr.retry(() => ["m", "s2"]);
      await Promise.resolve();
      expect(written).toEqual([["m"], ["m", "s2"]]);
      expect(isr.recording).toBe(false);
      expect(recorded).toEqual([["m", "s2"]]);
      isr.retry(() => ["m", "s3"]); // nothing failed since: nothing to write
      expect(written.length).toBe(2);
    });
  }
});
