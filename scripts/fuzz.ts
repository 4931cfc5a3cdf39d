/**
 * Seeded fuzz of the broker's connection handling: random and mutated frames go through the REAL
 * `Session` (src/server/session.ts) of a real `Broker`, over a fake `Connection` (the socket seam
 * tcp.ts implements), so millions of inputs run in minutes without sockets.
 *
 *   bun scripts/fuzz.ts --inputs 2000000 --seed 1
 *
 * Inputs: random bytes, valid operations with random or hostile fields (deep nesting, `__proto__`
 * keys, CBOR tags cbor-x knows: dates, bigints, sets, shared references, regexps…), byte-level
 * mutations of valid frames, frames split and glued across reads, every handshake stage, slow
 * readers (partial writes, drains) and timer ticks. Two brokers: without rules (open) and with
 * rules that include exclusive (`!`) grants.
 *
 * Checked on every input: nothing throws out of the session; every frame the broker writes decodes
 * and is a CHALLENGE, WELCOME, PONG, OK, DELIVER or ERROR; every ERROR carries a catalogued code
 * other than INTERNAL; a fatal code closes the connection; the broker logs no error. Checked at the
 * end, after every connection closed: no session, no exclusive claim and no in-flight delivery is
 * left, Object.prototype is untouched, the shared CBOR decoder still decodes maps as objects, and
 * each broker still serves a new client through the whole handshake (hello, challenge, signed
 * auth, consume, send, deliver, ack).
 *
 * Prints one summary line (`fuzz: … OK` or `fuzz: … FAILED`) and exits 1 on any failure.
 * tests/e2e/fuzz_test.ts runs a bounded version in the test suite.
 *
 * This file is the command line and the report; the fuzz itself is in scripts/fuzz/:
 * rng.ts (seeded randomness), cbor_writer.ts (CBOR that can say anything), inputs.ts (the hostile
 * inputs) and runner.ts (the sessions, the checks and the final checks).
 */
import { type FuzzReport, runSessionFuzz } from "./fuzz/runner.ts";

export { runSessionFuzz };
export type { FuzzOptions, FuzzReport } from "./fuzz/runner.ts";

export function summary(report: FuzzReport): string {
  const codes = Object.entries(report.errorCodes).sort((a, b) => b[1] - a[1]).map(([c, n]) => `${c}=${n}`).join(" ");
  const frames = Object.entries(report.framesOut).sort((a, b) => b[1] - a[1]).map(([c, n]) => `${c}=${n}`).join(" ");
  const status = report.failures.length === 0 ? "OK" : `FAILED (${report.failures.length} failure(s))`;
  return `fuzz: ${report.inputs} inputs, seed ${report.seed}, ${report.sessions} sessions (${report.handshakes} real handshakes), ` +
    `${(report.ms / 1000).toFixed(1)} s; frames out: ${frames}; error codes: ${codes}; ${status}`;
}

function argument(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  if (at < 0) return fallback;
  const value = Number(process.argv[at + 1]);
  if (!Number.isSafeInteger(value) || value < 0) {
    console.error(`--${name} must be a non-negative integer: current value is ${process.argv[at + 1]}`);
    process.exit(2);
  }
  return value;
}

if (import.meta.main) {
  const inputs = argument("inputs", 2_000_000);
  const seed = argument("seed", 1);
  const report = await runSessionFuzz({
    inputs,
    seed,
    maxFailures: 20,
    onProgress: (done) => console.error(`fuzz: ${done}/${inputs} inputs…`),
    progressEvery: 200_000,
  });
  for (const failure of report.failures) console.error(`FAILURE: ${failure}`);
  console.log(summary(report));
  process.exit(report.failures.length === 0 ? 0 : 1);
}
