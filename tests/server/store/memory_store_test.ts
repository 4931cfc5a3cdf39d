import { MemoryStore } from "../../../src/server/store/memory_store.ts";
import { runStoreConformance } from "./store_conformance.ts";

runStoreConformance("MemoryStore", async () => {
  const store = new MemoryStore();
  return { store, cleanup: () => store.close() };
});
