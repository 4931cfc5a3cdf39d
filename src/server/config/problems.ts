/**
 * How config problems are found and worded: every problem with its key path (`rules[2].read[0]`,
 * `channels["invoice/v1"].prefetch`), unknown keys with a "did you mean" hint, and the one
 * CONFIG_INVALID error that lists them all.
 */
import type * as v from "valibot";
import { KittenError } from "../../protocol/errors.ts";
import { isPlainObject, show } from "../internal/values.ts";
import {
  ADMIN_ENTRIES,
  CHANNEL_ENTRIES,
  CLUSTER_ENTRIES,
  CONFIG_ENTRIES,
  ETCD_ENTRIES,
  RULE_ENTRIES,
  SOCKET_ENTRIES,
} from "./schema.ts";

/** One config problem; `path` is written like `channels["invoice/v1"].prefetch`. */
export interface ConfigProblem {
  path: string;
  message: string;
}

export function isUnknownKey(issue: v.BaseIssue<unknown>): boolean {
  return issue.type === "strict_object" && issue.expected === "never" && issue.path?.at(-1)?.origin === "key";
}

export function toProblem(issue: v.BaseIssue<unknown>): ConfigProblem {
  const items = issue.path ?? [];
  const path = formatPath(items.map((item) => item.key));
  if (issue.type === "strict_object" && items.at(-1)?.origin === "key") return { path, message: "is required" };
  return { path, message: `${issue.message}: current value is ${show(issue.input)}` };
}

const TLS_ENTRIES = { cert: null, key: null };

/** Every key the schema does not know, in every object of the file, each with a "did you mean" hint. */
export function unknownKeyProblems(config: Record<string, unknown>): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const visit = (value: unknown, entries: Record<string, unknown>, keys: unknown[]) => {
    if (!isPlainObject(value)) return;
    for (const key of Object.keys(value)) {
      if (Object.hasOwn(entries, key)) continue;
      const typo = key.toLowerCase();
      // One edit for short keys, two for long ones: close enough to be a typo, not another word.
      const guess = Object.keys(entries).find((known) => editDistance(known.toLowerCase(), typo) <= (typo.length >= 4 ? 2 : 1));
      problems.push({ path: formatPath([...keys, key]), message: guess ? `unknown key (did you mean "${guess}"?)` : "unknown key" });
    }
  };
  visit(config, CONFIG_ENTRIES, []);
  if (isPlainObject(config.cluster)) {
    visit(config.cluster, CLUSTER_ENTRIES, ["cluster"]);
    visit(config.cluster.etcd, ETCD_ENTRIES, ["cluster", "etcd"]);
  }
  for (const section of ["socketServer", "admin"] as const) {
    const value = config[section];
    visit(value, section === "admin" ? ADMIN_ENTRIES : SOCKET_ENTRIES, [section]);
    if (isPlainObject(value)) visit(value.tls, TLS_ENTRIES, [section, "tls"]);
  }
  if (Array.isArray(config.rules)) config.rules.forEach((rule, index) => visit(rule, RULE_ENTRIES, ["rules", index]));
  if (isPlainObject(config.channels)) {
    for (const [queue, channel] of Object.entries(config.channels)) visit(channel, CHANNEL_ENTRIES, ["channels", queue]);
  }
  return problems;
}

/** `socketServer.port`, `rules[2].read[0]`; channel keys always as `channels["invoice/v1"]`. */
function formatPath(keys: unknown[]): string {
  if (keys.length === 0) return "(root)";
  let out = "";
  keys.forEach((key, index) => {
    if (typeof key === "number") out += `[${key}]`;
    else if (index === 1 && keys[0] === "channels") out += `[${JSON.stringify(key)}]`;
    else if (/^[A-Za-z_$][\w$]*$/.test(String(key))) out += index === 0 ? String(key) : `.${String(key)}`;
    else out += `[${JSON.stringify(String(key))}]`;
  });
  return out;
}

/** Levenshtein distance, small and only run on unknown keys, for the "did you mean" hint. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}

export function configError(source: string, problems: ConfigProblem[], cause?: unknown): KittenError {
  const count = `${problems.length} problem${problems.length === 1 ? "" : "s"}`;
  const list = problems.map((problem) => `${problem.path}: ${problem.message}`).join("; ");
  const message = `Cannot load config "${source}": ${count}: ${list}`;
  return new KittenError("CONFIG_INVALID", message, problems, cause === undefined ? undefined : { cause });
}
