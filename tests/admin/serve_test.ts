/**
 * startAdmin() on a real port: binding, the bearer token over the network, TLS, and slow or
 * idle connections being closed (slowloris).
 */
import { afterEach, describe, expect, it } from "bun:test";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { join } from "node:path";
import { type AdminServer, startAdmin } from "../../src/admin/mod.ts";
import { adminFixture, type Fixture } from "./_fixture.ts";

let fixture: Fixture;
let admin: AdminServer | null = null;
afterEach(async () => {
  await admin?.stop(true);
  admin = null;
  await fixture?.close();
});

/** Resolves with the ms until the server closed the socket, or null if still open at `timeoutMs`. */
function closedWithin(socket: Socket, timeoutMs: number): Promise<number | null> {
  const started = Date.now();
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(null), timeoutMs);
    socket.on("error", () => {});
    socket.resume(); // read (and drop) what arrives: a paused socket never reports its end
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(Date.now() - started);
    });
  });
}

function dial(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => resolve(socket));
    socket.once("error", reject);
  });
}

describe("startAdmin()", () => {
  it("startAdmin() binds httpServerPort 0 to a free port on 127.0.0.1 and serves the app", async () => {
    fixture = adminFixture();
    admin = startAdmin(fixture.server);
    expect(admin.port).toBeGreaterThan(0);
    expect(admin.url).toBe(`http://127.0.0.1:${admin.port}`);
    const response = await fetch(`${admin.url}/health`);
    expect(await response.json()).toEqual({ status: "ok" });
    expect(response.headers.get("cache-control")).toBe("no-store");
  });

  it("startAdmin() on a non-loopback host: 401 without the token, 200 with it", async () => {
    fixture = adminFixture({ admin: { host: "0.0.0.0", token: "s3cret" } });
    admin = startAdmin(fixture.server);
    const url = `http://127.0.0.1:${admin.port}/status`;
    const refused = await fetch(url);
    expect(refused.status).toBe(401);
    expect(await refused.json()).toMatchObject({ code: "UNAUTHORIZED" });
    expect((await fetch(url, { headers: { Authorization: "Bearer s3cret" } })).status).toBe(200);
  });

  it("startAdmin() reports a port in use with the keys to change", async () => {
    fixture = adminFixture();
    admin = startAdmin(fixture.server);
    const taken = { ...fixture.server.broker.config, httpServerPort: admin.port };
    expect(() => startAdmin(fixture.server, taken)).toThrow(/Cannot start the admin API on 127\.0\.0\.1:\d+ \(admin\.host, httpServerPort\)/);
  });

  it("startAdmin() closes idle keep-alive connections after admin.idleTimeoutSeconds", async () => {
    fixture = adminFixture({ admin: { idleTimeoutSeconds: 1 } });
    admin = startAdmin(fixture.server);
    const socket = await dial(admin.port);
    const closed = closedWithin(socket, 8000);
    socket.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); // answered, then the connection idles
    const elapsed = await closed;
    expect(elapsed).not.toBeNull();
  }, 15_000);

  it("startAdmin() closes slowloris connections: a partial request, even one trickling bytes", async () => {
    fixture = adminFixture({ admin: { idleTimeoutSeconds: 1 } });
    admin = startAdmin(fixture.server);
    const partial = await dial(admin.port);
    partial.write("GET /health HT"); // never finishes the request line
    const trickle = await dial(admin.port);
    trickle.write("GET /health HTTP/1.1\r\nX-Slow: ");
    const drip = setInterval(() => trickle.writable && trickle.write("a"), 500); // a byte now and then
    try {
      // Bun closes a request whose headers are not complete within about 10 s, idle or not
      // (its timer ticks every 4 s); what matters is that it is closed, and soon.
      const [a, b] = await Promise.all([closedWithin(partial, 20_000), closedWithin(trickle, 20_000)]);
      expect(a).not.toBeNull();
      expect(b).not.toBeNull();
    } finally {
      clearInterval(drip);
    }
    expect((await fetch(`${admin.url}/health`)).status).toBe(200); // and the server still serves
  }, 30_000);

  it("startAdmin() serves HTTPS when admin.tls names a certificate and key", async () => {
    const openssl = spawnSync("openssl", ["version"]);
    if (openssl.status !== 0) {
      console.warn("skipped: openssl is not installed, no certificate to test TLS with");
      return;
    }
    fixture = adminFixture();
    const [cert, key] = [join(fixture.dir, "cert.pem"), join(fixture.dir, "key.pem")];
    const made = spawnSync("openssl", [
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
      "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
    ]);
    expect(made.status).toBe(0);
    expect(existsSync(cert)).toBe(true);
    const config = { ...fixture.server.broker.config, admin: { ...fixture.server.broker.config.admin, tls: { cert, key } } };
    admin = startAdmin(fixture.server, config);
    expect(admin.url).toStartWith("https://127.0.0.1:");
    const response = await fetch(`${admin.url}/health`, { tls: { rejectUnauthorized: false } });
    expect(response.status).toBe(200);
  });
});
