/**
 * The layout's rules, checked on the import graph of src/:
 * - src/protocol (the wire format, shared by client and broker) imports nothing of ours outside it;
 * - src/client, and the client's entry mod.ts, import only src/protocol and src/version.ts (a
 *   leaf), so the client runs on Bun, Deno and Node;
 * - src/server never imports src/client, src/admin or src/cli (they build on it, not the reverse);
 * - src/admin and src/cli reach the broker through src/server/mod.ts only;
 * - src/bench (benchmarks: it starts brokers as processes) imports the client through
 *   src/client/mod.ts and nothing of the broker, admin or CLI; src/cli uses it;
 * - no `Bun.` in src/protocol, src/client or src/bench/worker (the bench workers run on Node too);
 * - no file under src/, tests/ or scripts/ over 500 lines;
 * - no import cycle among the files of src/.
 * Imports are the static `import … from`, `import "…"`, `export … from` and literal `import("…")`,
 * type-only ones included: a type is a dependency on the file that states it. node: builtins and
 * npm packages are not ours and never count. Each check is a pure function of a graph, and the
 * self-tests at the end feed it graphs that break each rule.
 */
import { describe, expect, it } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";

const ROOT = join(import.meta.dir, "..");
const MAX_LINES = 500;

/** A file's imports of our own files, as paths from the repository root (`src/client/client.ts`). */
type Graph = Map<string, string[]>;

/** Which of our files a folder (or file) may import: `only` lists all it may; `never` what it must not. */
interface Rule {
  from: string;
  only?: string[];
  never?: string[];
}

const RULES: Rule[] = [
  { from: "src/protocol/", only: ["src/protocol/"] },
  { from: "src/client/", only: ["src/client/", "src/protocol/", "src/version.ts"] },
  { from: "src/version.ts", only: [] },
  // The published client entry (what Deno and Bun import, and the npm build's entry point).
  { from: "mod.ts", only: ["src/client/", "src/protocol/", "src/version.ts"] },
  { from: "src/server/", never: ["src/client/", "src/admin/", "src/cli/"] },
  // The admin app and the CLI use the broker through its public surface only.
  { from: "src/admin/", only: ["src/admin/", "src/protocol/", "src/server/mod.ts", "src/version.ts"] },
  { from: "src/bench/", only: ["src/bench/", "src/client/mod.ts", "src/protocol/", "src/version.ts"] },
  { from: "src/cli/", only: ["src/cli/", "src/protocol/", "src/server/mod.ts", "src/admin/mod.ts", "src/bench/mod.ts", "src/version.ts"] },
];
const NO_BUN = ["src/protocol/", "src/client/", "src/bench/worker/", "mod.ts"];

/**
 * The source with comments removed; strings, template literals and regular expressions kept (so
 * that a `//` or a quote inside them is not taken for a comment or a string).
 */
function stripComments(source: string): string {
  let out = "";
  let i = 0;
  let depth = 0; // open braces of code
  const templates: number[] = []; // for each `${` being read, the brace depth it opened at
  const copyUntil = (close: string) => { // a string or a regular expression, from its opening mark
    const start = i++;
    let inClass = false;
    while (i < source.length && source[i] !== "\n" && (source[i] !== close || inClass)) {
      if (source[i] === "\\") i++;
      else if (close === "/" && source[i] === "[") inClass = true;
      else if (close === "/" && source[i] === "]") inClass = false;
      i++;
    }
    out += source.slice(start, ++i);
  };
  const template = () => { // from just after a backtick, or after the `}` of a `${…}`
    while (i < source.length) {
      const c = source[i]!;
      if (c === "\\") {
        out += source.slice(i, i + 2);
        i += 2;
      } else if (c === "`") {
        out += c;
        i++;
        return;
      } else if (c === "$" && source[i + 1] === "{") {
        out += "${";
        i += 2;
        templates.push(depth);
        return;
      } else {
        out += c;
        i++;
      }
    }
  };
  while (i < source.length) {
    const c = source[i]!;
    if (c === "/" && source[i + 1] === "/") {
      while (i < source.length && source[i] !== "\n") i++;
    } else if (c === "/" && source[i + 1] === "*") {
      const end = source.indexOf("*/", i + 2);
      const stop = end < 0 ? source.length : end + 2;
      out += source.slice(i, stop).replace(/[^\n]/g, " ");
      i = stop;
    } else if (c === '"' || c === "'") {
      copyUntil(c);
    } else if (c === "/" && /(?:^|[(,=:[!&|?{};+\-*%<>~^]|\breturn|\btypeof)\s*$/.test(out.slice(-20))) {
      copyUntil("/"); // a regular expression literal
    } else if (c === "`") {
      out += c;
      i++;
      template();
    } else if (c === "}" && templates.length > 0 && templates.at(-1) === depth) {
      templates.pop();
      out += c;
      i++;
      template();
    } else {
      if (c === "{") depth++;
      else if (c === "}") depth--;
      out += c;
      i++;
    }
  }
  return out;
}

/** The module specifiers a file imports or re-exports (literal ones only). */
function parseImports(source: string): string[] {
  const code = stripComments(source);
  const found: string[] = [];
  const patterns = [
    /^\s*(?:import|export)\s[^;"'`]*?\bfrom\s*["']([^"']+)["']/gm, // import … from, export … from
    /^\s*import\s*["']([^"']+)["']/gm, // import "x" (for its effects)
    /\bimport\(\s*["']([^"']+)["']\s*\)/g, // import("x")
  ];
  for (const pattern of patterns) for (const match of code.matchAll(pattern)) found.push(match[1]!);
  return found;
}

/** Our file a specifier names (from the repository root), or null for node: builtins and packages. */
function resolveImport(file: string, specifier: string): string | null {
  if (!specifier.startsWith(".")) return null;
  return relative(ROOT, join(ROOT, dirname(file), specifier)).split("\\").join("/");
}

/** `from → to` imports that break a rule. */
function directionProblems(graph: Graph, rules: Rule[] = RULES): string[] {
  const problems: string[] = [];
  for (const [file, targets] of graph) {
    for (const rule of rules) {
      if (!file.startsWith(rule.from)) continue;
      for (const target of targets) {
        const allowed = rule.only ? rule.only.some((prefix) => target.startsWith(prefix)) : true;
        const refused = rule.never?.some((prefix) => target.startsWith(prefix)) ?? false;
        if (!allowed || refused) problems.push(`${file} imports ${target} (${rule.from} ${rule.only ? `may import only ${rule.only.join(", ") || "nothing of ours"}` : `must not import ${rule.never!.join(", ")}`})`);
      }
    }
  }
  return problems;
}

/** One cycle per strongly connected component of the graph, as a path `a → b → … → a`. */
function findCycles(graph: Graph): string[] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  const visit = (node: string) => {
    index.set(node, counter);
    low.set(node, counter++);
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) low.set(node, Math.min(low.get(node)!, index.get(next)!));
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      const selfLoop = (graph.get(node) ?? []).includes(node);
      if (component.length > 1 || selfLoop) components.push(component);
    }
  };
  for (const node of [...graph.keys()].sort()) if (!index.has(node)) visit(node);
  return components.map((component) => cyclePath(graph, new Set(component)));
}

/** A shortest cycle through the component's first file (breadth-first inside the component). */
function cyclePath(graph: Graph, component: Set<string>): string {
  const start = [...component].sort()[0]!;
  const previous = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const node = queue.shift()!;
    for (const next of graph.get(node) ?? []) {
      if (!component.has(next)) continue;
      if (next === start) {
        const path: string[] = [];
        for (let at = node; at !== start; at = previous.get(at)!) path.unshift(at);
        return [start, ...path, start].join(" → ");
      }
      if (!previous.has(next)) {
        previous.set(next, node);
        queue.push(next);
      }
    }
  }
  return [...component].join(" → ");
}

/** Files whose code (comments aside) uses the `Bun` global. */
function bunProblems(sources: Map<string, string>, folders: string[] = NO_BUN): string[] {
  return [...sources]
    .filter(([file, source]) => folders.some((folder) => file.startsWith(folder)) && /\bBun\./.test(stripComments(source)))
    .map(([file]) => file);
}

/** Files over `max` lines, longest first, with their counts. */
function longFiles(lines: Map<string, number>, max = MAX_LINES): string[] {
  return [...lines].filter(([, count]) => count > max).sort((a, b) => b[1] - a[1]).map(([file, count]) => `${file} (${count})`);
}

function walk(folder: string): string[] {
  return readdirSync(join(ROOT, folder), { withFileTypes: true }).flatMap((entry) => {
    if (entry.name.startsWith(".") || entry.name === "node_modules") return [];
    const path = `${folder}/${entry.name}`;
    return entry.isDirectory() ? walk(path) : [path];
  });
}

function ourGraph(): { graph: Graph; sources: Map<string, string> } {
  const files = [...walk("src").filter((file) => file.endsWith(".ts")), "mod.ts"];
  const sources = new Map(files.map((file) => [file, readFileSync(join(ROOT, file), "utf8")]));
  const graph: Graph = new Map();
  for (const [file, source] of sources) {
    const targets = parseImports(source).map((specifier) => resolveImport(file, specifier)).filter((t) => t !== null);
    graph.set(file, [...new Set(targets)]);
  }
  return { graph, sources };
}

describe("architecture", () => {
  const { graph, sources } = ourGraph();

  it("reads the import graph of src/", () => {
    expect(graph.size).toBeGreaterThan(50);
    expect(graph.get("src/client/client.ts")).toContain("src/protocol/mod.ts");
    expect(graph.get("mod.ts")).toContain("src/client/mod.ts");
  });

  it("protocol imports only protocol; client only protocol and version.ts; server no client, admin or cli", () => {
    expect(directionProblems(graph)).toEqual([]);
  });

  it("no Bun global in src/protocol, src/client or src/bench/worker", () => {
    expect(bunProblems(sources)).toEqual([]);
  });

  it(`no file under src/, tests/ or scripts/ over ${MAX_LINES} lines`, () => {
    const lines = new Map(["src", "tests", "scripts"].flatMap(walk).map((file) => {
      const text = readFileSync(join(ROOT, file), "utf8");
      return [file, text.split("\n").length - (text.endsWith("\n") ? 1 : 0)] as const;
    }));
    expect(longFiles(lines)).toEqual([]);
  });

  it("no import cycle among the files of src/", () => {
    expect(findCycles(graph)).toEqual([]);
  });
});

describe("architecture checks fail when they should", () => {
  it("parseImports() reads every form of import, and none in comments or strings", () => {
    const source = [
      `import { a } from "./a.ts";`,
      `import type { B } from "../b.ts";`,
      `import {`,
      `  c,`,
      `  type D,`,
      `} from "./c.ts";`,
      `import "./effects.ts";`,
      `export { e } from "./e.ts";`,
      `export * from "./f.ts";`,
      `const g = await import("./g.ts");`,
      `// import { x } from "./commented.ts";`,
      `/* import("./blocked.ts") */`,
      "const text = `import(\"./in-template.ts\") ${`nested ${1}`} //not a comment`;",
      `const url = "http://example"; import("./after-url.ts");`,
      `import { readFile } from "node:fs/promises";`,
    ].join("\n");
    expect(parseImports(source).sort()).toEqual(
      ["./a.ts", "../b.ts", "./c.ts", "./effects.ts", "./e.ts", "./f.ts", "./g.ts", "./after-url.ts", "node:fs/promises", "./in-template.ts"].sort(),
    );
  });

  it("directionProblems() reports each import that breaks a rule", () => {
    const graph: Graph = new Map([
      ["src/protocol/ops.ts", ["src/protocol/errors.ts", "src/server/broker.ts"]],
      ["src/client/client.ts", ["src/protocol/mod.ts", "src/version.ts", "src/server/mod.ts"]],
      ["src/server/broker.ts", ["src/protocol/mod.ts", "src/cli/main.ts", "src/server/session.ts"]],
      ["src/version.ts", ["src/protocol/errors.ts"]],
      ["src/admin/app.ts", ["src/server/mod.ts"]],
    ]);
    const problems = directionProblems(graph);
    expect(problems.map((problem) => problem.split(" (")[0])).toEqual([
      "src/protocol/ops.ts imports src/server/broker.ts",
      "src/client/client.ts imports src/server/mod.ts",
      "src/server/broker.ts imports src/cli/main.ts",
      "src/version.ts imports src/protocol/errors.ts",
    ]);
  });

  it("findCycles() reports each cycle as a path, and nothing for a graph without one", () => {
    const graph: Graph = new Map([
      ["a.ts", ["b.ts"]],
      ["b.ts", ["c.ts", "d.ts"]],
      ["c.ts", ["a.ts"]],
      ["d.ts", ["e.ts"]],
      ["e.ts", ["d.ts"]],
      ["f.ts", ["f.ts"]],
      ["g.ts", ["a.ts"]],
    ]);
    expect(findCycles(graph).sort()).toEqual(["a.ts → b.ts → c.ts → a.ts", "d.ts → e.ts → d.ts", "f.ts → f.ts"]);
    expect(findCycles(new Map([["a.ts", ["b.ts"]], ["b.ts", ["c.ts"]], ["c.ts", []]]))).toEqual([]);
  });

  it("bunProblems() finds the Bun global in code, not in comments", () => {
    const sources = new Map([
      ["src/client/a.ts", "const f = Bun.file('x');"],
      ["src/client/b.ts", "// Bun.file is not used here\nconst x = 1;"],
      ["src/server/c.ts", "Bun.serve({});"],
    ]);
    expect(bunProblems(sources)).toEqual(["src/client/a.ts"]);
  });

  it("longFiles() names every file over the bound, longest first", () => {
    expect(longFiles(new Map([["a.ts", 500], ["b.ts", 501], ["c.ts", 900]]))).toEqual(["c.ts (900)", "b.ts (501)"]);
  });
});
