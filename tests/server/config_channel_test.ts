/**
 * The config, the rules and the hello read names with the protocol's own rules (channel.ts,
 * client_id.ts), limits included: a name the config accepts is one the broker can use.
 */
import { describe, expect, it } from "bun:test";
import { checkHello, OP } from "../../src/protocol/ops.ts";
import { type ConfigProblem, parseConfig } from "../../src/server/config/config.ts";
import { compileRules } from "../../src/server/security/rules.ts";
import { thrown } from "../helpers/errors.ts";

const LONG = "e".repeat(70); // over the 64 characters of an endpoint
const MAX = "e".repeat(64);

function problems(input: unknown): ConfigProblem[] {
  const error = thrown(() => parseConfig(input));
  expect(error.code).toBe("CONFIG_INVALID");
  expect(error.message.startsWith(`Cannot load config "config": `)).toBe(true);
  return error.details as ConfigProblem[];
}

describe("channel names in the config follow channel.ts", () => {
  it("a 70-character endpoint is refused in channels, deadLetter and rules, naming each key", () => {
    const found = problems({
      channels: { [`${LONG}/v1`]: {}, "a/v1": { deadLetter: `${LONG}/v1` } },
      rules: [{ client: "c", read: [`${LONG}/*`], write: [`x/v1/${"i".repeat(257)}`] }],
    });
    expect(found.map((problem) => problem.path)).toEqual([
      `rules[0].read[0]`,
      `rules[0].write[0]`,
      `channels["${LONG}/v1"]`,
      `channels["a/v1"].deadLetter`,
    ]);
    for (const problem of found.filter((p) => p.path !== "rules[0].write[0]")) {
      expect(problem.message).toContain(`must be 1 to 64 letters, digits, "-" or "_"`);
    }
    expect(found[1]!.message).toContain("must be 1 to 256 characters");
  });

  it("names at the limits are accepted", () => {
    const version = "v".repeat(32);
    const config = parseConfig({
      channels: { [`${MAX}/${version}`]: { deadLetter: `${MAX}/dead` } },
      rules: [{ client: "c", read: [`!${MAX}/${version}/${"i".repeat(256)}`, `${MAX}/*`] }],
    });
    expect(Object.keys(config.channels)).toEqual([`${MAX}/${version}`]);
    expect(problems({ channels: { [`a/${version}x`]: {} } })[0]!.message).toContain("must be 1 to 32");
  });

  it("compileRules() refuses what the config refuses, with CONFIG_INVALID and the key", () => {
    const error = thrown(() => compileRules([{ client: "c", read: [`${LONG}/*`] }]));
    expect(error.code).toBe("CONFIG_INVALID");
    expect(error.message).toStartWith(`Cannot use rules: rules[0].read[0]: endpoint "${LONG}" must be 1 to 64`);
    expect(thrown(() => compileRules([{ client: "c", write: ["*/v1/x"] }])).message).toContain(`endpoint cannot be "*"`);
  });

  it("serviceId follows the client id rule, as peers present it as one", () => {
    expect(problems({ serviceId: ".hidden" })[0]!.path).toBe("serviceId");
    expect(parseConfig({ serviceId: "b".repeat(128) }).serviceId).toBe("b".repeat(128));
  });
});

describe("checkHello() reads the client id with client_id.ts", () => {
  it("refuses an id client_id.ts refuses with BAD_CLIENT_ID", () => {
    for (const client of ["", "c".repeat(129), ".hidden", "a/b"]) {
      const error = thrown(() => checkHello([OP.HELLO, 1, { client }]));
      expect(error.code).toBe("BAD_CLIENT_ID");
      expect(error.message).toStartWith("Cannot use client id ");
    }
    expect(() => checkHello([OP.HELLO, 1, { client: "c".repeat(128) }])).not.toThrow();
  });
});
