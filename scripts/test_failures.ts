/**
 * The failed tests of a runner's output, each with what the runner printed before it, for
 * `npm test` to repeat at the end: a CI log is often read from its tail, and bun prints a test's
 * error above its `(fail)` line, far from the summary.
 */

/** Lines of bun's output before a `(fail)` line: the assertion and the stack that explain it. */
const FAILURE_CONTEXT_LINES = 40;

/** Each failed test of bun's output with the lines before its first `(fail)` line (its error). */
export function bunFailures(output: string): string[] {
  const lines = output.split("\n");
  const seen = new Set<string>();
  const failures: string[] = [];
  lines.forEach((line, at) => {
    if (!line.startsWith("(fail) ") || seen.has(line)) return;
    seen.add(line);
    failures.push(lines.slice(Math.max(0, at - FAILURE_CONTEXT_LINES), at + 1).join("\n"));
  });
  return failures;
}
