import { expect, it } from "bun:test";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { freePort } from "./ports.ts";

it("freePort() gives distinct ports that can be listened on, outside the kernel's range of source ports", async () => {
  const ports = await Promise.all(Array.from({ length: 20 }, () => freePort()));
  expect(new Set(ports).size).toBe(20);
  const [low, high] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
  for (const port of ports) expect(port < low! || port > high!).toBe(true);
  for (const port of ports) {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", resolve);
    });
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
