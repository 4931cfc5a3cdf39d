import { afterEach, describe, expect, it } from "bun:test";
import { sampleStats } from "../../src/server/server.ts";
import { HISTORY_POINTS, Track } from "../../src/server/stats/history.ts";
import { adminFixture, type Fixture } from "./_fixture.ts";

let fixture: Fixture;
afterEach(async () => await fixture?.close());

/** Moves the injected clock one second and takes the once-a-second sample, as the server's timer does. */
function second(f: Fixture): void {
  f.clock.advance(1000);
  sampleStats(f.server.broker, f.clock.now);
}

describe("GET /history", () => {
  it("GET /history gives per-second rates and depths, broker-wide and per queue", async () => {
    const f = fixture = adminFixture({ listenerPrefetch: 1000 });
    const listener = f.subscribe(f.session("audit"), "listen", "orders/v1", ["*"]);
    for (let i = 0; i < 4; i++) await f.send(`orders/v1/${i}`, i);
    f.ackAll(listener);
    await f.send("other/v1/1", "waits");
    second(f);
    second(f); // a quiet second
    const broker = (await f.request("/history")).body;
    expect(broker.queue).toBeNull();
    expect(broker.stepSeconds).toBe(1);
    expect(broker.times).toEqual([f.clock.now - 1000, f.clock.now]);
    expect(broker.series.received).toEqual([5, 0]);
    expect(broker.series.sent).toEqual([4, 0]);
    expect(broker.series.acked).toEqual([4, 0]);
    expect(broker.series.waiting).toEqual([1, 1]);
    expect(broker.series.connections).toEqual([1, 1]);

    const orders = (await f.request("/history?queue=orders/v1")).body;
    expect(orders.queue).toBe("orders/v1");
    expect(orders.series.received).toEqual([4, 0]);
    expect(orders.series.delivered).toEqual([4, 0]);
    expect(orders.series.acked).toEqual([4, 0]);
    expect(orders.series.waiting).toEqual([0, 0]);
    const other = (await f.request("/history?queue=other/v1")).body;
    expect(other.series.waiting).toEqual([1, 1]);
  });

  it("GET /history?queue= refuses a bad name (400) and an unknown queue (404)", async () => {
    const f = fixture = adminFixture();
    const bad = await f.request("/history?queue=orders");
    expect(bad.status).toBe(400);
    expect(bad.body.code).toBe("BAD_REQUEST");
    const unknown = await f.request("/history?queue=nope/v1");
    expect(unknown.status).toBe(404);
    expect(unknown.body.message).toContain(`"nope/v1"`);
  });

  it("Track keeps the last 15 minutes only, oldest first, rates over the seconds elapsed", () => {
    const track = new Track(["received", "ready"], 0);
    for (let s = 1; s <= HISTORY_POINTS + 100; s++) track.record(s * 1000, [s * 10, s]);
    const view = track.view(null);
    expect(view.times.length).toBe(HISTORY_POINTS);
    expect(view.times[0]).toBe(101_000);
    expect(view.times.at(-1)).toBe((HISTORY_POINTS + 100) * 1000);
    expect(view.series.ready![0]).toBe(101);
    expect(new Set(view.series.received)).toEqual(new Set([10]));
    // A timer two seconds late: the increase is spread over two seconds, not one spike.
    track.record((HISTORY_POINTS + 102) * 1000, [(HISTORY_POINTS + 102) * 10, 0]);
    expect(track.view(null).series.received!.at(-1)).toBe(10);
  });
});
