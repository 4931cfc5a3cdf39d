import { describe, expect, it } from "bun:test";
import { client } from "../../mod.ts";
import { defaultOptions, parseHost, parseOptions } from "../../src/client/options.ts";
import { thrown } from "../helpers/errors.ts";

const HOSTS = ["127.0.0.1:1234@broker-1"];

describe("client options", () => {
  it("parseOptions() fills every default the user leaves out, and keeps what the user gives", () => {
    const options = parseOptions({ hosts: HOSTS, clientId: "shop-1", maxPendingMessages: 5, keysName: undefined });
    expect(options).toEqual({
      hosts: HOSTS,
      clientId: "shop-1",
      keysDirectory: "keys",
      keysName: "client",
      maxPendingMessages: 5,
      sendTimeoutMs: 60_000,
      reconnectDelayMs: 100,
      maxReconnectDelayMs: 5_000,
      maxFrameSize: 64 * 1024 * 1024,
      handshakeTimeoutMs: 10_000,
      tls: null,
    });
    expect(options.maxPendingMessages).toBe(5);
    expect(defaultOptions().maxPendingMessages).toBe(10_000);
    expect(parseOptions({ hosts: HOSTS })).toEqual({
      hosts: HOSTS,
      clientId: "myclient-id",
      keysDirectory: "keys",
      keysName: "client",
      maxPendingMessages: 10_000,
      sendTimeoutMs: 60_000,
      reconnectDelayMs: 100,
      maxReconnectDelayMs: 5_000,
      maxFrameSize: 64 * 1024 * 1024,
      handshakeTimeoutMs: 10_000,
      tls: null,
    });
  });

  it("parseOptions() refuses a missing config, missing or non-array hosts and a malformed host", () => {
    expect(() => parseOptions(undefined)).toThrow(TypeError);
    expect(() => parseOptions({ clientId: "a" })).toThrow(/"hosts" must be a non-empty array/);
    expect(() => parseOptions({ hosts: [], clientId: "a" })).toThrow(/"hosts" must be a non-empty array/);
    expect(() => parseOptions({ hosts: ["localhost"], clientId: "a" })).toThrow(/host "localhost" must look like/);
    expect(() => parseOptions({ hosts: ["127.0.0.1:70000"], clientId: "a" })).toThrow(/port 1\.\.65535/);
    for (const hosts of ["127.0.0.1:1234", { 0: "127.0.0.1:1234", length: 1 }, null]) {
      expect(() => parseOptions({ hosts: hosts as never, clientId: "a" })).toThrow(TypeError);
      expect(() => parseOptions({ hosts: hosts as never, clientId: "a" })).toThrow(/"hosts" must be a non-empty array/);
    }
  });

  it("parseOptions() refuses with a TypeError a host entry that is not a string", () => {
    for (const host of [1234, null, { host: "127.0.0.1", port: 1234 }]) {
      const hosts = [...HOSTS, host] as never;
      expect(() => parseOptions({ hosts, clientId: "a" })).toThrow(TypeError);
      expect(() => parseOptions({ hosts, clientId: "a" })).toThrow(/host must be a string/);
    }
  });

  it("parseOptions() refuses with BAD_CLIENT_ID the ids the broker would refuse at the handshake", () => {
    for (const clientId of ["", "a/b", "../etc", ".hidden", "x".repeat(129), "é", "a b"]) {
      const error = thrown(() => parseOptions({ hosts: HOSTS, clientId }));
      expect(error.code).toBe("BAD_CLIENT_ID");
    }
    expect(thrown(() => parseOptions({ hosts: HOSTS, clientId: 42 as unknown as string })).code).toBe("BAD_CLIENT_ID");
    for (const clientId of ["a", "shop-1", "Shop_1.eu", "x".repeat(128), "-lead"]) {
      expect(parseOptions({ hosts: HOSTS, clientId }).clientId).toBe(clientId);
    }
  });

  it("parseOptions() refuses empty key names, a tls that is not an object and non-positive limits, naming the key", () => {
    expect(() => parseOptions({ hosts: HOSTS, keysDirectory: "" })).toThrow(/"keysDirectory" must be a non-empty string/);
    expect(() => parseOptions({ hosts: HOSTS, keysName: "" })).toThrow(/"keysName" must be a non-empty string/);
    expect(() => parseOptions({ hosts: HOSTS, tls: "yes" as never })).toThrow(/"tls" must be an object/);
    for (const key of ["maxPendingMessages", "sendTimeoutMs", "reconnectDelayMs", "maxReconnectDelayMs", "maxFrameSize", "handshakeTimeoutMs"]) {
      expect(() => parseOptions({ hosts: HOSTS, [key]: 0 })).toThrow(new RegExp(`"${key}" must be a positive integer`));
      expect(() => parseOptions({ hosts: HOSTS, [key]: 1.5 })).toThrow(RangeError);
      for (const value of [-1, NaN, Infinity, "5"]) {
        expect(() => parseOptions({ hosts: HOSTS, [key]: value })).toThrow(RangeError);
        expect(() => parseOptions({ hosts: HOSTS, [key]: value })).toThrow(new RegExp(`"${key}" must be a positive integer`));
      }
    }
  });

  it("parseOptions() accepts tls: null (plain TCP)", () => {
    expect(parseOptions({ hosts: HOSTS, tls: null }).tls).toBeNull();
  });

  it("parseHost() reads host, port, serviceId and token, IPv6 in brackets", () => {
    expect(parseHost("127.0.0.1:1234")).toEqual({
      host: "127.0.0.1",
      port: 1234,
      serviceId: null,
      token: null,
      label: "127.0.0.1:1234",
    });
    expect(parseHost("mq.local:1234@broker-1#s3cret")).toMatchObject({ host: "mq.local", serviceId: "broker-1", token: "s3cret" });
    expect(parseHost("[::1]:1234@b")).toMatchObject({ host: "::1", port: 1234, serviceId: "b", token: null });
    expect(parseHost("h:1@#t")).toMatchObject({ serviceId: null, token: "t" });
  });

  it("connect() with an id the broker would refuse throws BAD_CLIENT_ID before dialling anything", () => {
    const mq = client();
    const error = thrown(() => mq.connect({ hosts: ["127.0.0.1:1@broker-1"], clientId: "orders/eu" }));
    expect(error.code).toBe("BAD_CLIENT_ID");
    expect(error.message).toContain('"orders/eu"');
    expect(mq.status()).toEqual([]);
  });
});
