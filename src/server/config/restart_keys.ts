/**
 * Keys a reload cannot apply: the listening sockets, the store and the limits fixed when a
 * connection or the store opens. A reload that changes any of them is refused whole, naming each
 * one, so the running broker and `GET /config` never disagree about what runs.
 */
import { KittenError } from "../../protocol/errors.ts";
import type { Config, ConfigProblem } from "./config.ts";

/** Each key with the reason it is fixed while the broker runs (shown to the operator). */
const RESTART_KEYS: readonly [path: string, read: (config: Config) => unknown, why: string][] = [
  ["socketServer.host", (c) => c.socketServer.host, "the client port is bound at start"],
  ["socketServer.port", (c) => c.socketServer.port, "the client port is bound at start"],
  ["socketServer.tls", (c) => c.socketServer.tls, "the client port's certificate is loaded at start"],
  ["socketServer.maxFrameSize", (c) => c.socketServer.maxFrameSize, "connected clients were told the size in welcome"],
  ["isManagementInterface", (c) => c.isManagementInterface, "the admin API is started (or not) at start"],
  ["httpServerPort", (c) => c.httpServerPort, "the admin port is bound at start"],
  ["admin.host", (c) => c.admin.host, "the admin port is bound at start"],
  ["admin.tls", (c) => c.admin.tls, "the admin port's certificate is loaded at start"],
  ["admin.idleTimeoutSeconds", (c) => c.admin.idleTimeoutSeconds, "the admin server is configured at start"],
  ["dataDirectory", (c) => c.dataDirectory, "the store is opened there at start"],
  ["commitIntervalMs", (c) => c.commitIntervalMs, "the store is opened with it at start"],
  ["cluster.etcd", (c) => c.cluster.etcd, "the election is joined (or not) at start"],
  ["cluster.group", (c) => c.cluster.group, "the group's election is joined at start"],
  ["cluster.advertise", (c) => c.cluster.advertise, "the broker's address is written in the queue map at start"],
];

/** The keys only a restart applies, as written in a config file. */
export const RESTART_KEY_PATHS: readonly string[] = RESTART_KEYS.map(([path]) => path);

/** The keys `next` changes that only a restart can apply, each with both values. */
export function restartKeyProblems(running: Config, next: Config): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const [path, read, why] of RESTART_KEYS) {
    const was = JSON.stringify(read(running));
    const wanted = JSON.stringify(read(next));
    if (was !== wanted) problems.push({ path, message: `needs a restart (${why}): running ${was}, file ${wanted}` });
  }
  return problems;
}

/** Throws CONFIG_INVALID listing every key of `next` that needs a restart; nothing is applied then. */
export function checkReloadable(running: Config, next: Config, source: string): void {
  const problems = restartKeyProblems(running, next);
  if (problems.length === 0) return;
  const list = problems.map((problem) => `${problem.path}: ${problem.message}`).join("; ");
  throw new KittenError(
    "CONFIG_INVALID",
    `Cannot reload "${source}": ${problems.length} key${problems.length === 1 ? "" : "s"} need a restart, nothing was applied: ${list}`,
    problems,
  );
}
