/** The CLI's help: the overview (`kitten-mq --help`) and each command's own (`kitten-mq CMD --help`). */
import { VERSION } from "../version.ts";

export interface CommandHelp {
  usage: string;
  summary: string;
  options?: string[];
  example: string;
  /** Its options are all it takes: not the admin API's -c and --json (start, bench). */
  ownOptionsOnly?: boolean;
}

export const COMMAND_HELP: Record<string, CommandHelp> = {
  start: {
    usage: "kitten-mq start [-c FILE]",
    summary: "Runs the broker and its admin API in the foreground. SIGUSR2 reloads the config file, SIGUSR1 soft-stops, SIGTERM/SIGINT stop.",
    options: ["-c, --config FILE   the broker's config (JSON; kitten-mq init-conf writes one)"],
    example: "kitten-mq start --config /etc/kitten-mq/kitten-mq.config.json",
    ownOptionsOnly: true,
  },
  status: {
    usage: "kitten-mq status [-c FILE] [--json]",
    summary: "Role, uptime, connections, depths and rates of the running broker.",
    example: "kitten-mq status -c kitten-mq.config.json",
  },
  groups: {
    usage: "kitten-mq groups [-q QUEUE] [-c FILE] [--json]",
    summary: "Queues spread over groups (cluster.etcd): every group with its live brokers and its queues, the map epoch, " +
      "and the broker's own group; with -q, the group that owns one queue. Without cluster.etcd it says there is no map.",
    options: ["-q, --queue QUEUE   endpoint/version: only its group and that group's brokers"],
    example: "kitten-mq groups -c kitten-mq.config.json",
  },
  move: {
    usage: "kitten-mq move QUEUE --to GROUP [--wait] | kitten-mq move --status [QUEUE] [-c FILE] [--json]",
    summary: "Moves a queue (endpoint/version) to another group (cluster.etcd) while it serves: any broker records the move, " +
      "the master of the queue's group runs it. --wait follows it: exit 0 once done, 1 when rolled back (with the reason). " +
      "--status lists each queue's move in progress or its last one: groups, state/phase, messages copied/snapshot, " +
      "how long sends were held at the switch, age, and why it was rolled back.",
    options: [
      "--to GROUP          the group to move the queue to",
      "--wait              follow the move until it is done or rolled back",
      "--status            the moves in progress and the last ones (of one queue with QUEUE)",
    ],
    example: "kitten-mq move orders/v1 --to g2 --wait -c kitten-mq.config.json",
  },
  rebalance: {
    usage: "kitten-mq rebalance [--dry-run] [--max N] [-c FILE] [--json]",
    summary: "Evens out the groups (cluster.etcd): moves queues from the heaviest group to the lightest while that narrows " +
      "the gap (a queue weighs 1, plus its rate per 1,000 msg/s), at most N moves, never a queue already moving. " +
      "--dry-run prints the plan only; otherwise the moves are asked for at once (exit 1 when any is refused); " +
      "kitten-mq move --status follows them.",
    options: ["--dry-run           print the plan, move nothing", "--max N             at most N moves (10)"],
    example: "kitten-mq rebalance --dry-run -c kitten-mq.config.json",
  },
  list: {
    usage: "kitten-mq list [-q QUEUE [-i ID] [-m [--limit N] [--offset N]]] [--json]",
    summary: "Every queue with its depths and counters; with -q, one queue's ids, consumers and listeners; -m adds its messages (as peek).",
    options: ["-q, --queue QUEUE   endpoint/version", "-i, --id ID         one destination id", "-m, --messages      a page of messages (--limit 50)"],
    example: "kitten-mq list -q orders/v1 -i 42 -m",
  },
  peek: {
    usage: "kitten-mq peek -q QUEUE [-i ID] [--limit N] [--offset N] [--json]",
    summary: "Shows a queue's messages without taking them: nothing is delivered, acked or removed.",
    options: ["-q, --queue QUEUE   endpoint/version", "-i, --id ID         only the messages of one destination id", "--limit N, --offset N   the page (50 from 0)"],
    example: "kitten-mq peek -q orders/v1 --limit 10",
  },
  publish: {
    usage: "kitten-mq publish CHANNEL JSON [-c FILE] [--json]",
    summary: "Sends one message through the admin API, as client \"kitten-mq-admin\": the channel's format and the rules apply.",
    example: "kitten-mq publish orders/v1/42 '{\"order\": 42, \"total\": 9.5}'",
  },
  delete: {
    usage: "kitten-mq delete -q QUEUE [-i ID] [--yes]",
    summary: "Purges ready, delayed and waiting messages (asks first; --yes when stdin is not a terminal). In-flight deliveries stay.",
    options: ["-q, --queue QUEUE   endpoint/version", "-i, --id ID         only one destination id", "-y, --yes           do not ask"],
    example: "kitten-mq delete -q orders/v1 -i 42 --yes",
  },
  reload: {
    usage: "kitten-mq reload [-c FILE] [--json]",
    summary: "Makes the broker re-read its config file; a bad file changes nothing and every problem is listed.",
    example: "kitten-mq reload -c kitten-mq.config.json",
  },
  "soft-stop": {
    usage: "kitten-mq soft-stop [-c FILE] [--json]",
    summary: "Refuses new work, lets in-flight deliveries finish (up to 30 s), then the broker exits.",
    example: "kitten-mq soft-stop -c kitten-mq.config.json",
  },
  stop: {
    usage: "kitten-mq stop [-c FILE] [--json]",
    summary: "The same as soft-stop with a 5 s bound (as SIGTERM).",
    example: "kitten-mq stop -c kitten-mq.config.json",
  },
  keys: {
    usage: "kitten-mq keys list | kitten-mq keys revoke CLIENT_ID",
    summary: "Pinned client keys; revoke un-pins one (key rotation: the client's next connection pins its new key).",
    example: "kitten-mq keys revoke billing-worker",
  },
  bench: {
    usage: "kitten-mq bench [SCENARIO…] [--host HOST:PORT[@SERVICE_ID#TOKEN]]… [--count N] [--size BYTES] [--json]",
    summary: "Measures a broker: msg/s (steady state and whole run), publish → deliver latency p50/p90/p99/max, CPU µs per message " +
      "of publisher, receivers and broker. Scenarios: work (1 publisher → 1 consumer acking), fanout (1 publisher → N listeners), " +
      "latency (1 publisher at --rate → 1 consumer); all by default. Without --host it starts its own broker (port 0, a temp " +
      "folder) and measures its CPU too. Every client is a process of its own.",
    options: [
      "--host HOST:PORT[@SERVICE_ID#TOKEN]",
      "                    a broker to measure; repeat it (or use commas) for a cluster group",
      "--scenario NAMES    work, fanout, latency or all, comma-separated (or as words after bench)",
      "--count N           messages per scenario (work, fanout: 100,000; latency: 5 s at --rate)",
      "--size BYTES        body size in CBOR bytes (128)",
      "--window N          unconfirmed sends at most, work and fanout (1000)",
      "--prefetch N        unacked deliveries each consumer asks for, work and latency (1000; a broker caps it at its prefetch)",
      "--listeners N       fanout's listening clients (4)",
      "--rate MSG/S        latency's send rate (5000)",
      "--durability MODE   memory or fsync: the broker bench starts (memory); not with --host",
      "--channel E/V       messages go to <E/V>/<scenario>-<run id> (bench/v1)",
      "--json              one JSON document instead of the table; errors as {\"code\", \"message\"}",
    ],
    example: "kitten-mq bench work --host 10.0.0.5:1234@broker-1 --count 200000 --json",
    ownOptionsOnly: true,
  },
  "init-conf": {
    usage: "kitten-mq init-conf [PATH] [--force] [--json]",
    summary: "Writes a config file with every default, documented (kitten-mq.config.json by default); never overwrites without --force.",
    example: "kitten-mq init-conf /etc/kitten-mq/kitten-mq.config.json",
  },
};

export const HELP = `kitten-mq ${VERSION}: easy to learn, secure and fast message broker

Usage:
  kitten-mq start [-c FILE]                  run the broker (and its admin API) in the foreground
  kitten-mq status [-c FILE]                 role, uptime, connections, depths, rates
  kitten-mq groups [-q QUEUE]                every group, its brokers and queues (cluster.etcd)
  kitten-mq move QUEUE --to GROUP [--wait]   move a queue to another group while it serves
  kitten-mq move --status                    moves in progress and the last ones
  kitten-mq rebalance [--dry-run] [--max N]  even out the groups by moving queues
  kitten-mq list [-q QUEUE [-i ID] [-m]]     queues; one queue's ids, consumers, listeners; -m its messages
  kitten-mq peek -q QUEUE [-i ID]            a queue's messages, without taking them
  kitten-mq publish CHANNEL JSON             send one message (endpoint/version/id) through the admin API
  kitten-mq delete -q QUEUE [-i ID] [--yes]  purge ready, delayed and waiting messages (asks first)
  kitten-mq reload [-c FILE]                 re-read the config file (a bad file changes nothing)
  kitten-mq soft-stop [-c FILE]              finish in-flight deliveries (up to 30 s), then exit
  kitten-mq stop [-c FILE]                   the same with a 5 s bound (as SIGTERM)
  kitten-mq keys list | keys revoke ID       pinned client keys; revoke un-pins one (key rotation)
  kitten-mq init-conf [PATH] [--force]       write a documented default config (kitten-mq.config.json)
  kitten-mq bench [SCENARIO] [--host HOST]   msg/s, latency, CPU per message (its own broker without --host)
  kitten-mq COMMAND --help                   one command's options and an example
  kitten-mq --version | --help

Options:
  -c, --config FILE   the broker's config (JSON); the other commands find its admin API through it
                      (admin.host, httpServerPort, admin.token, <dataDirectory>/admin.json)
  --json              print JSON (for scripts); errors too, as {"code", "message"}
  -q, --queue QUEUE   endpoint/version      -i, --id ID (or --channel ID)   a destination id
  -m, --messages      list the messages     --limit N, --offset N           a page of them (50)
  -y, --yes           do not ask            -f, --force                      overwrite (init-conf)
  --to GROUP          move's target group   --wait, --status                 move: follow it; list moves
  --dry-run           rebalance: plan only  --max N                          rebalance: at most N moves (10)

Exit codes: 0 done; 1 the command failed (broker not running, refused, not found); 2 bad usage.`;

export function commandHelp(name: string): string {
  const help = COMMAND_HELP[name]!;
  const options = [...(help.options ?? []), "-c, --config FILE   the broker's config, to find its admin API", "--json              JSON output; errors as {\"code\", \"message\"}"];
  const unique = help.ownOptionsOnly ? help.options ?? [] : options;
  return [
    `Usage: ${help.usage}`,
    "",
    help.summary,
    "",
    "Options:",
    ...unique.map((line) => `  ${line}`),
    "",
    "Example:",
    `  ${help.example}`,
    "",
    "Exit codes: 0 done; 1 failed; 2 bad usage. kitten-mq --help lists every command.",
  ].join("\n");
}
