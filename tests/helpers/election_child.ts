/**
 * A broker's election in its own process, so a test can kill it with SIGKILL (nothing revokes its
 * lease: etcd has to expire it). Run by `spawnElection()` in tests/helpers/election.ts.
 *
 *   bun tests/helpers/election_child.ts '<ElectionOptions as JSON, without log/now>'
 *
 * Writes one JSON line per event to stdout: `{"event":"elected","epoch":7}`,
 * `{"event":"steppedDown","reason":"…"}`, `{"event":"leader","current":{…}|null}`,
 * `{"event":"log","level":"warn","message":"…"}`. Reads commands from stdin, one per line:
 * `eligible`, `ineligible`, `resign`, `stop`.
 */
import { Election, type ElectionOptions } from "../../src/server/cluster/election.ts";

const options = JSON.parse(process.argv[2] ?? "{}") as Omit<ElectionOptions, "log" | "now">;
const write = (line: Record<string, unknown>) => process.stdout.write(JSON.stringify(line) + "\n");

const election = new Election(
  { ...options, log: (level, message) => write({ event: "log", level, message }) },
  {
    elected: (epoch) => write({ event: "elected", epoch }),
    steppedDown: (reason) => write({ event: "steppedDown", reason }),
    leader: (current) => write({ event: "leader", current }),
  },
);
election.start();
write({ event: "started" });

let buffered = "";
process.stdin.on("data", async (chunk: Buffer) => {
  buffered += chunk.toString();
  let newline: number;
  while ((newline = buffered.indexOf("\n")) >= 0) {
    const command = buffered.slice(0, newline).trim();
    buffered = buffered.slice(newline + 1);
    if (command === "eligible") election.setEligible(true);
    else if (command === "ineligible") election.setEligible(false);
    else if (command === "resign") await election.resign();
    else if (command === "stop") {
      await election.stop();
      process.exit(0);
    }
  }
});
