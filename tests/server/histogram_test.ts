import { describe, expect, it } from "bun:test";
import { Histogram, Sampler } from "../../src/server/stats/histogram.ts";
import { Stats } from "../../src/server/stats/stats.ts";

describe("histogram", () => {
  it("Histogram.observe() counts a value in the first bucket whose bound is >= it; cumulative() sums them", () => {
    const h = new Histogram([0.001, 0.01, 0.1]);
    for (const value of [0.0005, 0.001, 0.002, 0.05, 0.05, 3]) h.observe(value);
    expect(h.cumulative()).toEqual([[0.001, 2], [0.01, 3], [0.1, 5], [Infinity, 6]]);
    expect(h.count).toBe(6);
    expect(h.sum).toBeCloseTo(3.1035, 6);
    expect(h.quantile(0.5)).toBe(0.01);
    expect(h.quantile(1)).toBe(Infinity);
    expect(new Histogram([1]).quantile(0.5)).toBe(0);
  });

  it("Sampler.hit() says yes to the first call, then once every `every` calls", () => {
    const sampler = new Sampler(64);
    const hits = Array.from({ length: 200 }, (_, i) => (sampler.hit() ? i : -1)).filter((i) => i >= 0);
    expect(hits).toEqual([0, 64, 128, 192]);
  });

  it("Stats.eventLoopLag is the longest timer delay of the last second, in seconds", () => {
    const stats = new Stats(0);
    stats.noteTimerDelay(3);
    stats.noteTimerDelay(40);
    stats.noteTimerDelay(-2); // early: no lag
    stats.sample(1000);
    expect(stats.eventLoopLag).toBe(0.04);
    stats.sample(2000); // a second without delays
    expect(stats.eventLoopLag).toBe(0);
  });
});
