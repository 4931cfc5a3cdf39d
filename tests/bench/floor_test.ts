/**
 * The benchmark's floor measurement (scripts/bench/floor.ts): three real processes, a relay and
 * two node:net clients, must carry every message and report its latency. Short and slow-paced:
 * this checks that the measurement works, not how fast the machine is.
 */
import { expect, test } from "bun:test";
import { runFloor } from "../../scripts/bench/floor.ts";
import { live } from "../../scripts/bench/processes.ts";

const OPTIONS = { rate: 1000, seconds: 0.5, warmupSeconds: 0.2 };

test("runFloor() relays every message and reports latency over the measured ones and the pacing", async () => {
  const result = await runFloor(OPTIONS, 15_000);
  // 0.5 s measured at 1,000 msg/s after 0.2 s of warm-up: the warm-up's 200 are left out.
  expect(result.latency.n).toBe(500);
  expect(result.latency.min).toBeGreaterThan(0);
  // Loopback at 1,000 msg/s: a second is no latency but a lost or stalled message.
  expect(result.latency.max).toBeLessThan(1000);
  // "Same pacing" as (c): the schedule was kept, in small batches.
  expect(Math.abs(result.achievedRate - 1000)).toBeLessThanOrEqual(100);
  expect(result.maxBatch).toBeGreaterThanOrEqual(1);
  expect(live.size).toBe(0);
}, 20_000);

test("runFloor() rejects when its timeout passes and leaves no process running", async () => {
  await expect(runFloor(OPTIONS, 200)).rejects.toThrow("the floor run did not finish within 0.2 s");
  expect(live.size).toBe(0);
  // A child the run was about to start when it timed out must not appear afterwards either.
  await Bun.sleep(500);
  expect(live.size).toBe(0);
}, 20_000);
