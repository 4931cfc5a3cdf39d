/**
 * The benchmark's floor measurement (scripts/bench/floor.ts): three real processes, a relay and
 * two node:net clients, must carry every message and report its latency. Short and slow-paced:
 * this checks that the measurement works, not how fast the machine is.
 */
import { expect, test } from "bun:test";
import { runFloor } from "../../scripts/bench/floor.ts";

test("the floor relays every message and reports latency percentiles over the measured ones", async () => {
  const result = await runFloor({ rate: 1000, seconds: 0.5, warmupSeconds: 0.2 }, 15_000);
  // 0.5 s measured at 1,000 msg/s after 0.2 s of warm-up: the warm-up's 200 are left out.
  expect(result.latency.n).toBe(500);
  expect(result.latency.min).toBeGreaterThan(0);
  expect(result.latency.p50).toBeLessThanOrEqual(result.latency.p99);
  expect(result.latency.p99).toBeLessThanOrEqual(result.latency.max);
  expect(result.cpuS).toBeGreaterThan(0);
}, 20_000);
