/**
 * A queue move's pace (move/pacer.ts) and the client traffic it watches (move/traffic.ts): the
 * traffic in windows of the broker's tick, the baseline taken before the move, and the pace that
 * slows when the traffic falls and comes back when it recovers. MOVE_ACK's traffic field is
 * checked as the protocol says, and so is the delay a MOVE_APPEND may carry.
 */
import { describe, expect, it } from "bun:test";
import { checkMoveAck, moveDelayOf, OP } from "../../../src/protocol/mod.ts";
import { MIN_FACTOR, MovePacer, PRESSURE, REBASE_BELOW, REBASE_MS, RELIEF } from "../../../src/server/move/pacer.ts";
import { MIN_TRAFFIC, TRAFFIC_WINDOW_MS, TrafficBaseline, TrafficMeter } from "../../../src/server/move/traffic.ts";

/** A meter fed `rates` (msg/s), one window each, by a clock that advances TRAFFIC_WINDOW_MS a step. */
function metered(): { meter: TrafficMeter; run(rates: number[]): void } {
  let total = 0;
  let now = 1_000;
  const meter = new TrafficMeter(() => total);
  meter.sample(now);
  return {
    meter,
    run(rates) {
      for (const rate of rates) {
        meter.sample(now + TRAFFIC_WINDOW_MS / 2); // inside the window: nothing closes
        total += (rate * TRAFFIC_WINDOW_MS) / 1000;
        now += TRAFFIC_WINDOW_MS;
        meter.sample(now);
      }
    },
  };
}

describe("TrafficMeter", () => {
  it("closes one window per TRAFFIC_WINDOW_MS; current is the mean of the last two, mean() of the last eight", () => {
    const { meter, run } = metered();
    expect(meter.current).toBe(0);
    run([10_000]);
    expect(meter.current).toBe(10_000);
    run([20_000]);
    expect(meter.current).toBe(15_000);
    run([30_000, 30_000, 30_000, 30_000, 30_000, 30_000, 30_000, 30_000]); // the first two fall out of the eight
    expect(meter.mean()).toBe(30_000);
    expect(meter.current).toBe(30_000);
  });

  it("counts the windows before its first as no traffic: a burst in a broker's first half second is not a steady rate", () => {
    const { meter, run } = metered();
    run([24_000, 24_000]);
    expect(meter.mean()).toBe(6_000);
  });

  it("starts again from a clock that went back, without a window of nonsense", () => {
    let total = 0;
    const meter = new TrafficMeter(() => total);
    meter.sample(5_000);
    total = 1_000;
    meter.sample(1_000); // the clock went back: a new start, no window
    expect(meter.current).toBe(0);
    total = 3_500;
    meter.sample(1_000 + TRAFFIC_WINDOW_MS);
    expect(meter.current).toBe(10_000);
  });
});

describe("TrafficBaseline", () => {
  it("compares the traffic now with the mean before the move, and does not rise with a burst after it", () => {
    const { meter, run } = metered();
    run(new Array(8).fill(20_000));
    const baseline = new TrafficBaseline(meter);
    expect(baseline.ratio()).toBe(1);
    run([10_000, 10_000]);
    expect(baseline.ratio()).toBe(0.5);
    run([40_000, 40_000]); // a publisher catching up
    expect(baseline.ratio()).toBe(2);
    run([20_000, 20_000]);
    expect(baseline.ratio()).toBe(1); // the steady rate is not taken for a fall
  });

  it("tells nothing (null) below MIN_TRAFFIC: too few messages to tell a fall from noise", () => {
    const { meter, run } = metered();
    run(new Array(8).fill(MIN_TRAFFIC - 1));
    const baseline = new TrafficBaseline(meter);
    run([0, 0]);
    expect(baseline.ratio()).toBeNull();
  });
});

describe("MovePacer", () => {
  it("slows down while the traffic is below PRESSURE, never under MIN_FACTOR, and grows back above RELIEF", () => {
    const pacer = new MovePacer();
    let now = 0;
    const step = (ratios: (number | null)[]) => pacer.adjust((now += TRAFFIC_WINDOW_MS), ratios);
    expect(pacer.factor).toBe(1);
    step([PRESSURE - 0.01, null]);
    expect(pacer.factor).toBeLessThan(1);
    for (let i = 0; i < 50; i++) step([1, PRESSURE - 0.2]); // the lowest of the two decides
    expect(pacer.factor).toBe(MIN_FACTOR);
    const held = pacer.factor;
    step([(PRESSURE + RELIEF) / 2, null]); // between the two: holds
    expect(pacer.factor).toBe(held);
    for (let i = 0; i < 50; i++) step([RELIEF + 0.01, null]);
    expect(pacer.factor).toBe(1);
    for (let i = 0; i < 5; i++) step([null, null]); // nothing to tell: full pace stays
    expect(pacer.factor).toBe(1);
  });

  it("takes a fall that outlasts the slowest pace by REBASE_MS for the clients' own, and speeds up again", () => {
    const pacer = new MovePacer();
    let now = 0;
    const step = (ratios: (number | null)[]) => pacer.adjust((now += TRAFFIC_WINDOW_MS), ratios);
    // The target's clients halve their sends, whatever the move does.
    while (pacer.factor > MIN_FACTOR) step([null, 0.5]);
    const floorAt = now;
    while (now - floorAt < REBASE_MS) {
      step([null, 0.5]);
      if (now - floorAt < REBASE_MS) expect(pacer.factor).toBe(MIN_FACTOR);
    }
    for (let i = 0; i < 20; i++) step([null, 0.5]); // 0.5 is the new normal
    expect(pacer.factor).toBe(1);
    step([null, 0.5 * (PRESSURE - 0.05)]); // and a fall from it slows the move again
    expect(pacer.factor).toBeLessThan(1);
  });

  it("leaves out at once a side whose clients stopped sending altogether (a burst just before the move, then nothing)", () => {
    const pacer = new MovePacer();
    let now = 0;
    const step = (ratios: (number | null)[]) => pacer.adjust((now += TRAFFIC_WINDOW_MS), ratios);
    for (let i = 0; i < 20; i++) {
      step([0, null]);
      expect(pacer.factor).toBe(1);
    }
    step([0, 0.5]); // the other side's fall still counts
    expect(pacer.factor).toBeLessThan(1);
  });

  it("keeps the slowest pace while a saturated host loses less than 1 - REBASE_BELOW of its traffic to the move", () => {
    const pacer = new MovePacer();
    let now = 0;
    const ratio = (REBASE_BELOW + PRESSURE) / 2; // what a saturated host keeps at the slowest pace
    for (let i = 0; i < (4 * REBASE_MS) / TRAFFIC_WINDOW_MS; i++) pacer.adjust((now += TRAFFIC_WINDOW_MS), [ratio, null]);
    expect(pacer.factor).toBe(MIN_FACTOR);
  });

  it("adjusts at most once per window, however often the stream asks", () => {
    const pacer = new MovePacer();
    for (let t = 0; t < TRAFFIC_WINDOW_MS; t += 10) pacer.adjust(1_000 + t, [0.1]);
    const once = pacer.factor;
    expect(once).toBeLessThan(1);
    expect(once).toBeGreaterThan(MIN_FACTOR);
    pacer.adjust(1_000 + TRAFFIC_WINDOW_MS, [0.1]);
    expect(pacer.factor).toBeLessThan(once);
  });
});

describe("MOVE_ACK", () => {
  it("takes a traffic ratio, null, or none; refuses anything else with BAD_REQUEST", () => {
    expect(checkMoveAck([OP.MOVE_ACK, 5])[1]).toBe(5);
    expect(checkMoveAck([OP.MOVE_ACK, 5, 0.83])[2]).toBe(0.83);
    expect(checkMoveAck([OP.MOVE_ACK, 5, null])[2]).toBeNull();
    for (const bad of [-0.1, Number.NaN, Infinity, "1"]) {
      expect(() => checkMoveAck([OP.MOVE_ACK, 5, bad])).toThrow("traffic");
    }
  });
});

describe("MOVE_APPEND's delay", () => {
  it("is the tenth field in ms, 0 when absent or null; anything but an unsigned integer is BAD_REQUEST", () => {
    const append = [OP.MOVE_APPEND, 1, "m.1", "q/v1", "x", new Uint8Array(1), 1, 0, null];
    expect(moveDelayOf(append)).toBe(0);
    expect(moveDelayOf([...append, null])).toBe(0);
    expect(moveDelayOf([...append, 1500])).toBe(1500);
    for (const bad of [-1, 1.5, "10", Infinity]) expect(() => moveDelayOf([...append, bad])).toThrow("delay");
  });
});
