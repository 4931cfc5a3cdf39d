/**
 * The appends waiting for a commit: a failed commit forgets exactly those made in fsync mode
 * (their senders are told) and keeps the batch-mode ones (confirmed already), whatever the store's
 * own mode; a remove before the commit cancels an append.
 */
import { expect, it } from "bun:test";
import { PendingAppends } from "../../../src/server/store/pending_appends.ts";
import type { DurableMode, StoredMessage } from "../../../src/server/store/store.ts";
import { storedMessage } from "./store_conformance.ts";
import { unhandledRejectionsOf } from "../../helpers/unhandled.ts";

function appended(pending: PendingAppends, modes: DurableMode[]): StoredMessage[] {
  return modes.map((mode, i) => {
    const message = storedMessage(i + 1, { position: i + 1 });
    pending.add(i + 1, message, mode);
    return message;
  });
}

for (const storeMode of ["fsync", "batch"] as const) {
  it(`a failed commit of a ${storeMode} store forgets the fsync appends and keeps the batch ones, in order`, () => {
    const pending = new PendingAppends(storeMode);
    const messages = appended(pending, ["fsync", "batch", "fsync", "batch", "batch"]);
    expect(pending.failed()).toBe(2);
    expect([...pending.messages.keys()]).toEqual([2, 4, 5]);
    expect(messages.map((m) => m.position)).toEqual([undefined, 2, undefined, 4, 5]);
    // What is left is retried: a second failure forgets nothing more.
    expect(pending.failed()).toBe(0);
    expect(pending.size).toBe(3);
  });
}

it("an fsync append returns its batch's promise, shared until the commit takes it; a batch append returns nothing", async () => {
  const pending = new PendingAppends("fsync");
  const [first, second] = [storedMessage(1), storedMessage(2)];
  const promise = pending.add(1, first, "fsync");
  expect(pending.add(2, second, "fsync")).toBe(promise!);
  expect(pending.add(3, storedMessage(3), "batch")).toBeUndefined();
  expect(pending.cancel(3)).toBe(true);
  expect(pending.cancel(3)).toBe(false);
  const batch = pending.takeBatch()!;
  expect(pending.add(4, storedMessage(4), "fsync")).not.toBe(promise!);
  batch.resolve();
  await promise;
  pending.committed();
  expect(pending.size).toBe(0);
});

it("a batch whose commit fails after its senders went fails without an unhandled rejection", async () => {
  const unhandled = await unhandledRejectionsOf(() => {
    const pending = new PendingAppends("fsync");
    pending.add(1, storedMessage(1), "fsync"); // its sender closed its connection: nobody awaits it
    pending.takeBatch()!.reject(new Error("disk I/O error"));
  });
  expect(unhandled).toEqual([]);
});
