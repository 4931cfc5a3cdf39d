/**
 * The package.json files of the npm packages: the main package `kitten-mq` (client + launcher)
 * and one `@kitten-mq/<target>` per compiled binary. The repository's own package.json is private
 * (it is the development project); these are written from it by scripts/package.ts.
 */
import { TARGETS } from "../compile.ts";

export const MAIN_PACKAGE = "kitten-mq";
export const NODE_ENGINES = { node: ">=20" };

export type Target = (typeof TARGETS)[number];

export function platformPackageName(target: Target): string {
  return `@kitten-mq/${target.name}`;
}

/**
 * Targets npm selects by `os`/`cpu` as optional dependencies of the main package. The baseline
 * x64 build is left out (npm cannot select by CPU feature, so every x64 machine would download
 * both); the launcher uses it when it is installed and the CPU has no AVX2.
 */
export const OPTIONAL_TARGETS = TARGETS.filter((t) => !t.baseline);

export interface RootManifest {
  version: string;
  description?: string;
  license?: string;
  repository?: unknown;
  homepage?: string;
  bugs?: unknown;
}

const COMMON = (root: RootManifest) => ({
  version: root.version,
  license: root.license ?? "MIT",
  ...(root.repository ? { repository: root.repository } : {}),
  ...(root.homepage ? { homepage: root.homepage } : {}),
  ...(root.bugs ? { bugs: root.bugs } : {}),
});

export function mainManifest(root: RootManifest): Record<string, unknown> {
  return {
    name: MAIN_PACKAGE,
    ...COMMON(root),
    description: "Easy to learn, secure, business-ready, resilient and fast message queue: the client for Node.js, Bun and Deno, and the kitten-mq broker command",
    keywords: ["message queue", "mq", "broker", "pubsub", "work queue"],
    engines: NODE_ENGINES,
    main: "./index.cjs",
    types: "./index.d.cts",
    exports: {
      ".": {
        import: { types: "./index.d.mts", default: "./index.mjs" },
        require: { types: "./index.d.cts", default: "./index.cjs" },
      },
      "./package.json": "./package.json",
    },
    bin: { "kitten-mq": "bin/kitten-mq.cjs" },
    files: ["index.cjs", "index.mjs", "index.d.cts", "index.d.mts", "types/", "bin/", "THIRD_PARTY_LICENSES.md", "CHANGELOG.md", "docs/"],
    sideEffects: false,
    optionalDependencies: Object.fromEntries(OPTIONAL_TARGETS.map((t) => [platformPackageName(t), root.version])),
  };
}

export function platformManifest(root: RootManifest, target: Target): Record<string, unknown> {
  return {
    name: platformPackageName(target),
    ...COMMON(root),
    description: `The kitten-mq broker binary for ${target.os}-${target.arch}${target.baseline ? " CPUs without AVX2" : ""} (installed by the kitten-mq package)`,
    os: [target.os],
    cpu: [target.arch],
    engines: NODE_ENGINES,
    files: ["bin/kitten-mq"],
    // Package managers that would otherwise keep it zipped (Yarn PnP) must unpack an executable.
    preferUnplugged: true,
  };
}

export function platformReadme(target: Target): string {
  return [
    `# ${platformPackageName(target)}`,
    "",
    `The compiled \`kitten-mq\` broker for ${target.os}-${target.arch}${target.baseline ? " (x64 CPUs without AVX2)" : ""}.`,
    "Install `kitten-mq` instead: npm picks the binary package of your platform, and the `kitten-mq`",
    "command runs it.",
    "",
  ].join("\n");
}
