/** Ids counted by holder: an id held twice stays until both holders went. */
import { expect, it } from "bun:test";
import { IdCounts } from "../../../src/server/store/id_counts.ts";

it("an id is forgotten only when its last holder goes; clear() forgets every one", () => {
  const ids = new IdCounts();
  ids.add("a");
  ids.add("a");
  ids.add("b");
  ids.delete("a");
  expect([ids.has("a"), ids.has("b")]).toEqual([true, true]);
  ids.delete("a");
  ids.delete("never-added");
  expect([ids.has("a"), ids.has("never-added")]).toEqual([false, false]);
  ids.clear();
  expect(ids.has("b")).toBe(false);
});
