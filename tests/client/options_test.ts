import { describe, expect, it } from "bun:test";
import { client } from "../../mod.ts";
import { defaultOptions, parseHost, parseOptions } from "../../src/client/options.ts";
import { thrown } from "../helpers/errors.ts";

const HOSTS = ["127.0.0.1:1234@broker-1"];

describe("client options", () => {
  it("parseOptions() fills every default the user leaves out, and keeps what the user gives", () => {
    const options = parseOptions({ hosts: HOSTS, clientId: "shop-1", maxPendingMessages: 5, keysName: undefined });
    expect(options).toEqual({ ...defaultOptions(), hosts: HOSTS, clientId: "shop-1", maxPendingMessages: 5 });
    expect(options.maxPendingMessages).toBe(5);
    expect(defaultOptions().maxPendingMessages).toBe(10_000);
  });

  it("parseOptions() refuses a missing config, missing hosts and a malformed host", () => {
    expect(() => parseOptions(undefined)).toThrow(TypeError);
    expect(() => parseOptions({ clientId: "a" })).toThrow(/"hosts" must be a non-empty array/);
    expect(() => parseOptions({ hosts: [], clientId: "a" })).toThrow(/"hosts" must be a non-empty array/);
    expect(() => parseOptions({ hosts: ["localhost"], clientId: "a" })).toThrow(/host "localhost" must look like/);
    expect(() => parseOptions({ hosts: ["127.0.0.1:70000"], clientId: "a" })).toThrow(/port 1\.\.65535/);
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
    for (const key of ["maxPendingMessages", "reconnectDelayMs", "maxReconnectDelayMs", "maxFrameSize", "handshakeTimeoutMs"]) {
      expect(() => parseOptions({ hosts: HOSTS, [key]: 0 })).toThrow(new RegExp(`"${key}" must be a positive integer`));
      expect(() => parseOptions({ hosts: HOSTS, [key]: 1.5 })).toThrow(RangeError);
    }
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
