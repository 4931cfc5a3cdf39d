import { expect, it } from "bun:test";
import { KittenError } from "../../src/protocol/errors.ts";
import { Broker } from "../../src/server/broker.ts";
import { parseConfig } from "../../src/server/config/config.ts";
import { memoryLogger } from "../../src/server/log.ts";
import { MemoryStore } from "../../src/server/store/memory_store.ts";
import { thrown } from "../helpers/errors.ts";

it("Broker.reload() refuses a durable mode when the broker started without a store, and changes nothing", () => {
  const before = parseConfig({ durability: "memory", prefetch: 7 });
  const broker = new Broker(before, { logger: memoryLogger() });
  const broadly = thrown(() => broker.reload(parseConfig({ durability: "fsync", prefetch: 9 })));
  expect(broadly.code).toBe("CONFIG_INVALID");
  expect(broadly.message).toContain("durability");
  const perChannel = thrown(() =>
    broker.reload(parseConfig({ durability: "memory", channels: { "orders/v1": { durability: "batch" } } }))
  );
  expect(perChannel.code).toBe("CONFIG_INVALID");
  expect(perChannel.message).toContain(`channels["orders/v1"].durability`);
  expect(broker.config).toBe(before);
  // With a store, the same reload is accepted.
  const stored = new Broker(before, { logger: memoryLogger(), store: new MemoryStore() });
  stored.reload(parseConfig({ durability: "fsync", prefetch: 9 }));
  expect(stored.config.prefetch).toBe(9);
});

it("Broker.reload() promoting a slave whose store refuses the new epoch leaves it a slave, config unchanged", () => {
  const store = new MemoryStore();
  const slave = parseConfig({ durability: "fsync", isMaster: false, prefetch: 7 });
  const broker = new Broker(slave, { logger: memoryLogger(), store });
  const epoch = broker.epoch;
  store.setMeta = () => {
    throw new KittenError("STORE_UNAVAILABLE", "Cannot write: disk full");
  };
  expect(thrown(() => broker.reload(parseConfig({ durability: "fsync", isMaster: true, prefetch: 9 }))).code)
    .toBe("STORE_UNAVAILABLE");
  expect(broker.isMaster).toBe(false);
  expect(broker.epoch).toBe(epoch);
  expect(broker.config).toBe(slave);
});
