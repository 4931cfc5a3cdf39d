import { describe, expect, it } from "bun:test";
import { KittenError } from "../../src/protocol/errors.ts";
import type { Rule } from "../../src/server/config/config.ts";
import { parseConfig } from "../../src/server/config/config.ts";
import {
  compileRules,
  describeRefusal,
  directionOf,
  ExclusiveOwners,
  exclusiveTaken,
  notAllowed,
} from "../../src/server/security/rules.ts";

describe("compileRules()", () => {
  it("rules: no rules = open, every client may read and write everything", () => {
    const rules = compileRules([]);
    expect(rules.isOpen).toBe(true);
    expect(rules.accepts("anyone")).toBe(true);
    expect(rules.canRead("anyone", "invoice", "v1", "42")).toBe(true);
    expect(rules.canRead("anyone", "invoice", "v1", "*")).toBe(true);
    expect(rules.canWrite("anyone", "invoice", "v1", "*")).toBe(true);
    expect(rules.exclusivePattern("anyone", "invoice", "v1", "42")).toBeNull();
  });

  it("rules.accepts() takes exact and prefix clients and refuses a client matching no rule", () => {
    const rules = compileRules([{ client: "easilys-*", read: ["invoice/*"] }, { client: "billing" }]);
    expect(rules.isOpen).toBe(false);
    expect(rules.accepts("easilys-anything")).toBe(true);
    expect(rules.accepts("easilys-")).toBe(true);
    expect(rules.accepts("billing")).toBe(true);
    expect(rules.accepts("billing-2")).toBe(false);
    expect(rules.accepts("easily")).toBe(false);
    expect(rules.accepts("other")).toBe(false);
  });

  it("rules: only a trailing * is a wildcard in client", () => {
    const rules = compileRules([{ client: "a*b", read: ["e/*"] }, { client: "*", write: ["w/*"] }]);
    expect(rules.accepts("a*b")).toBe(true);
    expect(rules.canRead("a*b", "e", "v1", "1")).toBe(true);
    expect(rules.canRead("axb", "e", "v1", "1")).toBe(false);
    // A lone "*" matches every client (an operator's explicit choice).
    expect(rules.accepts("whoever")).toBe(true);
    expect(rules.canWrite("whoever", "w", "v1", "1")).toBe(true);
  });

  it("rules: a client matching no rule may do nothing (unlisted is not unrestricted)", () => {
    const rules = compileRules([{ client: "a", read: ["e/*"], write: ["e/*"] }]);
    expect(rules.canRead("pinned-but-unlisted", "e", "v1", "1")).toBe(false);
    expect(rules.canWrite("pinned-but-unlisted", "e", "v1", "1")).toBe(false);
    expect(rules.canRead("a", "other", "v1", "1")).toBe(false);
  });

  it("rules.canRead() and canWrite() are checked separately (read never grants write)", () => {
    const rules = compileRules([{ client: "c", read: ["invoice/v1/*"], write: ["order/v1/*"] }]);
    expect(rules.canRead("c", "invoice", "v1", "42")).toBe(true);
    expect(rules.canWrite("c", "invoice", "v1", "42")).toBe(false);
    expect(rules.canWrite("c", "order", "v1", "42")).toBe(true);
    expect(rules.canRead("c", "order", "v1", "42")).toBe(false);
  });

  it("rules: read rules of one client never leak write rights to another (the original's shared tree)", () => {
    const rules = compileRules([
      { client: "reader", read: ["invoice/v1/*"] },
      { client: "writer", write: ["invoice/v1/7"] },
    ]);
    expect(rules.canWrite("reader", "invoice", "v1", "7")).toBe(false);
    expect(rules.canRead("writer", "invoice", "v1", "7")).toBe(false);
    expect(rules.canWrite("writer", "invoice", "v1", "8")).toBe(false);
  });

  it("rules: e/* grants every version and id, including the * id", () => {
    const rules = compileRules([{ client: "c", read: ["invoice/*"] }]);
    expect(rules.canRead("c", "invoice", "v1", "42")).toBe(true);
    expect(rules.canRead("c", "invoice", "v2", "x")).toBe(true);
    expect(rules.canRead("c", "invoice", "v1", "*")).toBe(true);
    expect(rules.canRead("c", "invoices", "v1", "42")).toBe(false);
  });

  it("rules: e/v/* grants every id of one version, including the * id", () => {
    const rules = compileRules([{ client: "c", read: ["invoice/v1/*"] }]);
    expect(rules.canRead("c", "invoice", "v1", "42")).toBe(true);
    expect(rules.canRead("c", "invoice", "v1", "*")).toBe(true);
    expect(rules.canRead("c", "invoice", "v2", "42")).toBe(false);
  });

  it("rules: e/v/id grants one id and never the * id", () => {
    const rules = compileRules([{ client: "c", read: ["invoice/v1/42"], write: ["invoice/v1/42"] }]);
    expect(rules.canRead("c", "invoice", "v1", "42")).toBe(true);
    expect(rules.canRead("c", "invoice", "v1", "43")).toBe(false);
    expect(rules.canRead("c", "invoice", "v1", "*")).toBe(false);
    expect(rules.canWrite("c", "invoice", "v1", "*")).toBe(false); // no broadcast from a one-id grant
    expect(rules.canRead("c", "invoice", "v2", "42")).toBe(false);
  });

  it("rules: two rules matching one client give the union of their grants", () => {
    const rules = compileRules([
      { client: "easilys-*", read: ["invoice/v1/*"] },
      { client: "easilys-1", read: ["order/*"], write: ["invoice/v1/1"] },
    ]);
    expect(rules.canRead("easilys-1", "invoice", "v1", "9")).toBe(true);
    expect(rules.canRead("easilys-1", "order", "v3", "9")).toBe(true);
    expect(rules.canWrite("easilys-1", "invoice", "v1", "1")).toBe(true);
    expect(rules.canRead("easilys-2", "order", "v3", "9")).toBe(false);
    expect(rules.canWrite("easilys-2", "invoice", "v1", "1")).toBe(false);
  });

  it("rules: ids and endpoints named like Object.prototype keys are plain names", () => {
    const rules = compileRules([{ client: "c", read: ["e/v1/__proto__"] }]);
    expect(rules.canRead("c", "e", "v1", "__proto__")).toBe(true);
    expect(rules.canRead("c", "e", "v1", "constructor")).toBe(false);
    expect(rules.canRead("constructor", "e", "v1", "__proto__")).toBe(false);
  });

  it("rules.forClient() returns the same grants object for one client", () => {
    const rules = compileRules([{ client: "c", read: ["e/*"] }]);
    const grants = rules.forClient("c");
    expect(rules.forClient("c")).toBe(grants);
    expect(grants.canRead("e", "v1", "1")).toBe(true);
    expect(grants.canWrite("e", "v1", "1")).toBe(false);
  });

  it("rules compile from a parsed config", () => {
    const config = parseConfig({ rules: [{ client: "a-*", read: ["!invoice/v1/*"], write: ["invoice/*"] }] });
    const rules = compileRules(config.rules);
    expect(rules.canRead("a-1", "invoice", "v1", "5")).toBe(true);
    expect(rules.exclusivePattern("a-1", "invoice", "v1", "5")).toBe("!invoice/v1/*");
  });

  it("compileRules() refuses malformed patterns with CONFIG_INVALID naming the rule", () => {
    const bad: Rule[][] = [
      [{ client: "c", read: ["*/v1/1"] }],
      [{ client: "c", read: ["e"] }],
      [{ client: "c", read: ["e/v1"] }],
      [{ client: "c", write: ["e/*/1"] }],
      [{ client: "c", write: ["e/v1/1/2"] }],
      [{ client: "c", read: ["e//1"] }],
      [{ client: "", read: ["e/*"] }],
    ];
    for (const rules of bad) {
      try {
        compileRules(rules);
        throw new Error(`not refused: ${JSON.stringify(rules)}`);
      } catch (error) {
        expect(error).toBeInstanceOf(KittenError);
        expect((error as KittenError).code).toBe("CONFIG_INVALID");
        expect((error as KittenError).message).toContain("rules[0]");
      }
    }
  });
});

describe("exclusivity", () => {
  it("rules.exclusivePattern() reports the !-marked read grant at every level (!e/* is enforced)", () => {
    const rules = compileRules([
      { client: "a", read: ["!invoice/*"] },
      { client: "b", read: ["!invoice/v1/*"] },
      { client: "c", read: ["!invoice/v1/42", "invoice/v1/43"] },
    ]);
    expect(rules.exclusivePattern("a", "invoice", "v9", "1")).toBe("!invoice/*");
    expect(rules.exclusivePattern("b", "invoice", "v1", "1")).toBe("!invoice/v1/*");
    expect(rules.exclusivePattern("b", "invoice", "v1", "*")).toBe("!invoice/v1/*");
    expect(rules.exclusivePattern("c", "invoice", "v1", "42")).toBe("!invoice/v1/42");
    expect(rules.exclusivePattern("c", "invoice", "v1", "43")).toBeNull();
    expect(rules.exclusivePattern("c", "invoice", "v1", "44")).toBeNull(); // not readable at all
  });

  it("rules: a write rule never changes a read grant's exclusivity (the original's first-rule-wins bug)", () => {
    const rules = compileRules([
      { client: "c", write: ["invoice/v1/*"] },
      { client: "c", read: ["!invoice/v1/*"] },
    ]);
    expect(rules.exclusivePattern("c", "invoice", "v1", "1")).toBe("!invoice/v1/*");
  });

  it("rules: the most specific grant decides exclusivity; at one level ! wins", () => {
    const rules = compileRules([
      { client: "c", read: ["!invoice/*", "invoice/v1/42"] },
      { client: "d", read: ["invoice/v1/*"] },
      { client: "d*", read: ["!invoice/v1/*"] },
    ]);
    expect(rules.exclusivePattern("c", "invoice", "v1", "42")).toBeNull();
    expect(rules.exclusivePattern("c", "invoice", "v1", "43")).toBe("!invoice/*");
    expect(rules.exclusivePattern("d", "invoice", "v1", "1")).toBe("!invoice/v1/*");
  });

  it("rules: a plain grant is not exclusive for its client even when another rule's is", () => {
    const rules = compileRules([
      { client: "billing-*", read: ["!invoice/v1/*"] },
      { client: "audit", read: ["invoice/*"] },
    ]);
    expect(rules.exclusivePattern("billing-1", "invoice", "v1", "42")).toBe("!invoice/v1/*");
    expect(rules.exclusivePattern("audit", "invoice", "v1", "42")).toBeNull();
  });

  it("ExclusiveOwners: the first claimer owns an id, others are refused until it is released", () => {
    const owners = new ExclusiveOwners();
    expect(owners.claim("invoice/v1", "42", "a")).toBe(true);
    expect(owners.claim("invoice/v1", "42", "b")).toBe(false);
    expect(owners.ownerOf("invoice/v1", "42", "b")).toBe("a");
    expect(owners.claim("invoice/v1", "43", "b")).toBe(true); // other ids are free
    expect(owners.claim("invoice/v2", "42", "b")).toBe(true); // other queues are separate
    owners.unclaim("a", "invoice/v1", "42");
    expect(owners.claim("invoice/v1", "42", "b")).toBe(true);
  });

  it("ExclusiveOwners: an owner's registrations are counted; the id is free after the last release", () => {
    const owners = new ExclusiveOwners();
    expect(owners.claim("q/v1", "1", "a")).toBe(true);
    expect(owners.claim("q/v1", "1", "a")).toBe(true); // a second process of client "a"
    owners.unclaim("a", "q/v1", "1");
    expect(owners.claim("q/v1", "1", "b")).toBe(false);
    owners.unclaim("b", "q/v1", "1"); // not b's: ignored
    owners.unclaim("a", "q/v1", "1");
    expect(owners.size).toBe(0);
    expect(owners.claim("q/v1", "1", "b")).toBe(true);
  });

  it("ExclusiveOwners: a reconnecting owner takes its id back after releaseAll (the original could not)", () => {
    const owners = new ExclusiveOwners();
    owners.claim("q/v1", "1", "a");
    owners.claim("q/v1", "2", "a");
    owners.claim("r/v1", "1", "a");
    owners.claim("q/v1", "3", "b");
    owners.releaseAll("a"); // connection closed
    expect(owners.size).toBe(1);
    expect(owners.claim("q/v1", "1", "a")).toBe(true); // reconnected
    expect(owners.claim("q/v1", "3", "a")).toBe(false);
    owners.releaseAll("unknown"); // harmless
  });

  it("ExclusiveOwners: the * id overlaps every id of its queue", () => {
    const owners = new ExclusiveOwners();
    expect(owners.claim("q/v1", "1", "a")).toBe(true);
    expect(owners.claim("q/v1", "*", "b")).toBe(false); // b would receive a's id
    expect(owners.claim("q/v1", "*", "a")).toBe(true);
    expect(owners.claim("q/v1", "2", "b")).toBe(false); // a holds every id
    owners.releaseAll("a");
    expect(owners.claim("q/v1", "2", "b")).toBe(true);
    expect(owners.claim("other/v1", "*", "a")).toBe(true);
  });

  it("ExclusiveOwners.claimAll() claims every id or none", () => {
    const owners = new ExclusiveOwners();
    owners.claim("q/v1", "2", "b");
    expect(owners.claimAll("q/v1", ["1", "2", "3"], "a")).toBe("2");
    expect(owners.ownerOf("q/v1", "1", "c")).toBeUndefined(); // nothing left claimed
    expect(owners.claimAll("q/v1", ["1", "3"], "a")).toBeNull();
    expect(owners.ownerOf("q/v1", "3", "c")).toBe("a");
  });
});

describe("refusal messages", () => {
  it("describeRefusal() names the client, the channel and the direction", () => {
    expect(describeRefusal("easilys-1", "listen", "invoice/v1/42")).toBe(
      'Cannot listen to "invoice/v1/42": client "easilys-1" has no read rule matching it',
    );
    expect(describeRefusal("c", "consume", "e/v/1")).toBe(
      'Cannot consume "e/v/1": client "c" has no read rule matching it',
    );
    expect(describeRefusal("c", "addId", "e/v/1")).toContain("no read rule");
    expect(describeRefusal("c", "send", "e/v/*")).toBe(
      'Cannot send to "e/v/*": client "c" has no write rule matching it',
    );
    expect(directionOf("send")).toBe("write");
    expect(directionOf("addId")).toBe("read");
  });

  it("notAllowed() and exclusiveTaken() build coded errors with details", () => {
    const refused = notAllowed("c", "send", "e/v/1");
    expect(refused.code).toBe("NOT_ALLOWED");
    expect(refused.details).toEqual({ client: "c", channel: "e/v/1", direction: "write" });
    const taken = exclusiveTaken("b", "listen", "invoice/v1/42", "!invoice/v1/*");
    expect(taken.code).toBe("EXCLUSIVE_TAKEN");
    expect(taken.message).toContain('client "b"');
    expect(taken.message).toContain('"!invoice/v1/*"');
    expect(taken.message).toContain('"invoice/v1/42"');
  });
});
