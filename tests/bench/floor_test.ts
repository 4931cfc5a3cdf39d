/**
 * The benchmark's floor measurement (scripts/bench/floor.ts): three real processes, a relay and
 * two node:net clients, must carry every message and report its latency. Short and slow-paced:
 * this checks that the measurement works, not how fast the machine is. Whether the publisher kept
 * its pace is a rate, so `npm run bench` checks it (pacingWarning), not this test.
 */
import { expect, test } from "bun:test";
import { pacingWarning, runFloor } from "../../scripts/bench/floor.ts";
import { live } from "../../scripts/bench/processes.ts";

const OPTIONS = { rate: 1000, seconds: 0.5, warmupSeconds: 0.2 };

test("runFloor() relays every message and reports latency over the measured ones and the pacing", async () => {
  const result = await runFloor(OPTIONS, 15_000);
  // 0.5 s measured at 1,000 msg/s after 0.2 s of warm-up: the warm-up's 200 are left out.
  expect(result.latency.n).toBe(500);
  expect(result.latency.min).toBeGreaterThan(0);
  // Loopback at 1,000 msg/s: a second is no latency but a lost or stalled message.
  expect(result.latency.max).toBeLessThan(1000);
  // The pacing is reported (its value is the benchmark's to judge).
  expect(result.achievedRate).toBeGreaterThan(0);
  expect(result.maxBatch).toBeGreaterThanOrEqual(1);
  expect(live.size).toBe(0);
}, 20_000);

test("pacingWarning() names a publisher that strayed more than 10% from its rate, and only then", () => {
  expect(pacingWarning({ achievedRate: 1000 }, 1000)).toBeNull();
  expect(pacingWarning({ achievedRate: 900 }, 1000)).toBeNull();
  expect(pacingWarning({ achievedRate: 1100 }, 1000)).toBeNull();
  expect(pacingWarning({ achievedRate: 899 }, 1000)).toContain("sent at 899/s, asked 1000/s");
  expect(pacingWarning({ achievedRate: 1101 }, 1000)).toContain("floor pacing not kept");
});

test("runFloor() rejects when its timeout passes and leaves no process running", async () => {
  await expect(runFloor(OPTIONS, 200)).rejects.toThrow("the floor run did not finish within 0.2 s");
  expect(live.size).toBe(0);
  // A child the run was about to start when it timed out must not appear afterwards either. The
  // window is the subject: the run goes on in the background and has no event for "started nothing".
  await Bun.sleep(500);
  expect(live.size).toBe(0);
}, 20_000);
