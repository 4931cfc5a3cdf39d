import { afterAll, expect, it } from "bun:test";
import { existsSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { TempDirs } from "./temp_dir.ts";

const temps = new TempDirs("kitten-tempdirs-");
afterAll(() => temps.removeAll());

it("TempDirs.make() creates a new empty folder in the OS temp folder, named by its prefix", () => {
  const dir = temps.make();
  expect(statSync(dir).isDirectory()).toBe(true);
  expect(readdirSync(dir)).toEqual([]);
  expect(dirname(dir)).toBe(tmpdir());
  expect(basename(dir)).toMatch(/^kitten-tempdirs-.{6}$/);
  expect(basename(temps.make("kitten-tempdirs-other-"))).toMatch(/^kitten-tempdirs-other-.{6}$/);
  expect(temps.make()).not.toBe(dir);
});

it("TempDirs.removeAll() deletes every folder made, with its contents", () => {
  const dirs = [temps.make(), temps.make(), temps.make("kitten-tempdirs-other-")];
  writeFileSync(join(dirs[0]!, "file.txt"), "x");
  temps.removeAll();
  for (const dir of dirs) expect(existsSync(dir)).toBe(false);
});

it("TempDirs.removeAll() works when a folder was already removed by someone else", () => {
  const gone = temps.make();
  const kept = temps.make();
  rmSync(gone, { recursive: true });
  expect(() => temps.removeAll()).not.toThrow();
  expect(existsSync(kept)).toBe(false);
});

it("TempDirs.make() works again after removeAll(), and the next removeAll() deletes the new folder", () => {
  const before = temps.make();
  temps.removeAll();
  const after = temps.make();
  expect(statSync(after).isDirectory()).toBe(true);
  expect(readdirSync(after)).toEqual([]);
  expect(existsSync(before)).toBe(false);
  temps.removeAll();
  expect(existsSync(after)).toBe(false);
});
