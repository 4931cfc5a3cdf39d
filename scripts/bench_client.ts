/**
 * One client process of `npm run bench` (scripts/bench.ts starts it; it is not meant to be run
 * by hand): the bench worker of src/bench/worker/, which `kitten-mq bench` runs too.
 *
 *   bun scripts/bench_client.ts <publisher|rate|consumer|listener> '<json options>'
 *
 * scripts/bench/node.ts bundles this file for Node, with the npm package's client.
 */
import { processIo, workerMain } from "../src/bench/worker/mod.ts";

if (import.meta.main) workerMain(process.argv.slice(2), processIo()).then((code) => process.exit(code));
