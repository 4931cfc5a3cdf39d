import { afterEach, expect, it } from "bun:test";
import { join } from "node:path";
import { adminFixture, type Fixture, writeConfig } from "./_fixture.ts";

let fixture: Fixture;
afterEach(async () => await fixture?.close());

function base(f: Fixture): Record<string, unknown> {
  return {
    socketServer: { port: 0 },
    httpServerPort: 0,
    durability: "memory",
    registeredClientsPath: join(f.dir, "clients"),
    dataDirectory: join(f.dir, "data"),
  };
}

it("POST /reload changing keys that need a restart lists every one, applies nothing, logs it; GET /config shows what runs", async () => {
  const f = (fixture = adminFixture());
  const before = f.server.broker.config;
  writeConfig(f, {
    ...base(f),
    socketServer: { port: 45999, maxFrameSize: 2048 },
    httpServerPort: 45998,
    dataDirectory: join(f.dir, "elsewhere"),
    maxItemsInQueue: 7, // reloadable, but not applied either: a reload is all or nothing
  });
  const { status, body } = await f.request("/reload", { method: "POST" });
  expect(status).toBe(400);
  expect(body.code).toBe("CONFIG_INVALID");
  expect(body.message).toContain("4 keys need a restart, nothing was applied");
  expect(body.details.map((problem: { path: string }) => problem.path)).toEqual([
    "socketServer.port",
    "socketServer.maxFrameSize",
    "httpServerPort",
    "dataDirectory",
  ]);
  expect(body.details[0].message).toContain("running 0, file 45999");
  expect(f.server.broker.config).toBe(before);
  const running = (await f.request("/config")).body.config;
  expect(running.socketServer.port).toBe(0);
  expect(running.socketServer.maxFrameSize).toBe(1048576);
  expect(running.maxItemsInQueue).toBe(null); // the default: by durability
  const logged = f.logger.lines.filter((line) => line.includes("reload refused"));
  expect(logged).toHaveLength(1);
  expect(logged[0]).toContain("socketServer.port");
  expect(logged[0]).toContain("dataDirectory");
});

it("POST /reload of a file with problems logs every one of them", async () => {
  const f = (fixture = adminFixture());
  writeConfig(f, { ...base(f), requeuInterval: 5, prefetchh: 2 });
  const { status, body } = await f.request("/reload", { method: "POST" });
  expect(status).toBe(400);
  expect(body.details).toHaveLength(2);
  const logged = f.logger.lines.find((line) => line.includes("reload refused"));
  expect(logged).toContain(`requeuInterval: unknown key (did you mean "requeueInterval"?)`);
  expect(logged).toContain(`prefetchh: unknown key (did you mean "prefetch"?)`);
});

it("POST /reload changing only reloadable keys applies them", async () => {
  const f = (fixture = adminFixture());
  writeConfig(f, { ...base(f), maxItemsInQueue: 7, socketServer: { port: 0, maxOutgoingBytes: 131072 } });
  expect((await f.request("/reload", { method: "POST" })).status).toBe(200);
  expect(f.server.broker.config.maxItemsInQueue).toBe(7);
  expect(f.server.broker.config.socketServer.maxOutgoingBytes).toBe(131072);
});
