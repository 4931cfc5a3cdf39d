import { describe, expect, it } from "bun:test";
import {
  checkChannelParts,
  endpointProblem,
  formatChannel,
  idProblem,
  matchChannel,
  parseChannel,
  queueName,
  versionProblem,
  WILDCARD,
} from "../../src/protocol/channel.ts";
import { thrown } from "../helpers/errors.ts";

describe("channel", () => {
  it("parseChannel() splits endpoint, version and id", () => {
    expect(parseChannel("endpoint/v1/42")).toEqual({ endpoint: "endpoint", version: "v1", id: "42" });
    expect(parseChannel("my-end_point/1.0/abc%2Fdef")).toEqual({
      endpoint: "my-end_point",
      version: "1.0",
      id: "abc%2Fdef",
    });
    expect(parseChannel("e/v1/*")).toEqual({ endpoint: "e", version: "v1", id: WILDCARD });
    expect(parseChannel("e/v1/a%2Ab%20c")).toEqual({ endpoint: "e", version: "v1", id: "a%2Ab%20c" });
  });

  it("parseChannel() refuses malformed names with BAD_CHANNEL naming the channel", () => {
    const refused = [
      "",
      "e",
      "e/v1",
      "e/v1/",
      "/v1/1",
      "e//1",
      "*/v1/1",
      "e/*/1",
      "e/v1/a/b",
      "e/v1/a*",
      "e/v1/*a",
      "e/v1/**",
      "e/v1/a b",
      "e/v1/a\tb",
      "e/v1/a\x00",
      "e.x/v1/1",
      "e/v 1/1",
      "e/v1/" + "x".repeat(257),
      "x".repeat(65) + "/v1/1",
      "e/" + "1".repeat(33) + "/1",
    ];
    for (const name of refused) {
      const error = thrown(() => parseChannel(name));
      expect(error.code).toBe("BAD_CHANNEL");
      expect(error.message).toContain(`"${name}"`);
    }
  });

  it("parseChannel() says which part is wrong", () => {
    expect(thrown(() => parseChannel("*/v1/1")).message).toContain('endpoint cannot be "*"');
    expect(thrown(() => parseChannel("e/*/1")).message).toContain('version cannot be "*"');
    expect(thrown(() => parseChannel("e/v1/a/b")).message).toContain('id "a/b"');
    expect(thrown(() => parseChannel("e/v1")).message).toContain("endpoint/version/id");
  });

  it("parseChannel() starts the message with the action", () => {
    const error = thrown(() => parseChannel("e/v1", "Cannot send to"));
    expect(error.message.startsWith('Cannot send to "e/v1"')).toBe(true);
    expect(thrown(() => parseChannel("e/v1")).message.startsWith('Cannot use channel "e/v1"')).toBe(true);
  });

  it("parseChannel() accepts parts exactly at their length limits", () => {
    const endpoint = "e".repeat(64);
    const version = "v".repeat(32);
    const id = "i".repeat(256);
    expect(parseChannel(`${endpoint}/${version}/${id}`)).toEqual({ endpoint, version, id });
  });

  it("endpointProblem(), versionProblem() and idProblem() return null for valid parts only", () => {
    expect(endpointProblem("my-end_point9")).toBeNull();
    expect(endpointProblem("*")).toContain("endpoint");
    expect(endpointProblem("")).toContain("endpoint");
    expect(versionProblem("1.0")).toBeNull();
    expect(versionProblem("v2")).toBeNull();
    expect(versionProblem("*")).toContain("version");
    expect(versionProblem("v/2")).toContain("version");
    expect(idProblem("*")).toBeNull();
    expect(idProblem("abc%2Fdef")).toBeNull();
    expect(idProblem("")).toContain("id");
    expect(idProblem("a*")).toContain("id");
    expect(idProblem("a/b")).toContain("id");
  });

  it("checkChannelParts() accepts valid parts with a list of ids", () => {
    expect(() => checkChannelParts("e", "v1", ["1", "*", "abc%2Fdef"], "Cannot listen to")).not.toThrow();
    expect(() => checkChannelParts("e", "1.0", [], "Cannot listen to")).not.toThrow();
  });

  it("checkChannelParts() refuses a bad endpoint, version or id with BAD_CHANNEL", () => {
    const cases: [string, string, string[], string][] = [
      ["*", "v1", ["1"], "endpoint"],
      ["e", "*", ["1"], "version"],
      ["e x", "v1", ["1"], "endpoint"],
      ["e", "v1", ["1", "a/b"], 'id "a/b"'],
      ["e", "v1", ["a*"], 'id "a*"'],
      ["e", "v1", [""], "id"],
      ["e", "v1", ["ok", "a b"], 'id "a b"'],
    ];
    for (const [endpoint, version, ids, part] of cases) {
      const error = thrown(() => checkChannelParts(endpoint, version, ids, "Cannot consume"));
      expect(error.code).toBe("BAD_CHANNEL");
      expect(error.message.startsWith(`Cannot consume "${endpoint}/${version}"`)).toBe(true);
      expect(error.message).toContain(part);
    }
  });

  it("matchChannel() matches a name, an id wildcard and a version wildcard", () => {
    expect(matchChannel("e/v/42", "e/v/42")).toBe(true);
    expect(matchChannel("e/v/*", "e/v/42")).toBe(true);
    expect(matchChannel("e/v/*", "e/v/*")).toBe(true);
    expect(matchChannel("e/*", "e/v2/x")).toBe(true);
    expect(matchChannel("e/*", "e/v/*")).toBe(true);
  });

  it("matchChannel() refuses other versions, endpoints and prefixes", () => {
    expect(matchChannel("e/v/42", "e/v/43")).toBe(false);
    expect(matchChannel("e/v/42", "e/v/421")).toBe(false);
    expect(matchChannel("e/v/*", "e/v2/1")).toBe(false);
    expect(matchChannel("e/v/*", "e/v")).toBe(false);
    expect(matchChannel("e/v/*", "e/v/")).toBe(false);
    expect(matchChannel("ab/*", "abc/v/1")).toBe(false);
    expect(matchChannel("e/*", "f/v/1")).toBe(false);
    expect(matchChannel("e/v/4*", "e/v/42")).toBe(false);
  });

  it("formatChannel() inverts parseChannel() and queueName() joins endpoint and version", () => {
    for (const name of ["endpoint/v1/42", "my-end_point/1.0/abc%2Fdef", "e/v1/*"]) {
      expect(formatChannel(parseChannel(name))).toBe(name);
    }
    expect(queueName("e", "v1")).toBe("e/v1");
  });
});
