/**
 * @module
 * Benchmarks of a Kitten-MQ broker: `kitten-mq bench` (src/cli/commands/bench.ts) runs
 * `runBench()`; `npm run bench` (scripts/bench.ts) builds its own scenarios on `runPlan()`, the
 * same workers and the same figures. Workers (./worker/) use the client and run on Bun and Node;
 * the rest runs on Bun and starts processes. Nothing here imports the broker: it is started as
 * a process (`kitten-mq start`), or runs elsewhere.
 */
export { type BenchHooks, type BenchOptions, type BenchReport, runBench } from "./bench.ts";
export type { Percentiles, ScenarioFigures } from "./figures.ts";
export { isCompiled, WORKER_COMMAND } from "./processes.ts";
export { ms } from "./results.ts";
export { DEFAULT_COUNTS, DEFAULTS, LATENCY_SECONDS, type ScenarioName, SCENARIOS, smallestBody } from "./scenarios.ts";
export { processIo, workerMain } from "./worker/mod.ts";
