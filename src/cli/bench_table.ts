/**
 * `kitten-mq bench`'s table: one column per scenario, one row per figure, then what each
 * scenario was. Numbers right-aligned, with separators; latencies in ms, CPU in µs per message.
 */
import { type BenchReport, ms, type Percentiles, type ScenarioFigures } from "../bench/mod.ts";
import { count } from "./format.ts";

const NOT_MEASURED = "not measured (remote broker)";

/** A row: its label and one cell per scenario, or one text for every scenario at once. */
type Row = [string, ...string[]] | { label: string; all: string };

function rows(report: BenchReport): Row[] {
  const each = (label: string, cell: (s: ScenarioFigures) => string): [string, ...string[]] => [label, ...report.scenarios.map(cell)];
  const latency = (key: keyof Percentiles) => (s: ScenarioFigures) => (s.latencyMs ? ms(s.latencyMs[key]) : "-");
  const cpu = (value: number | null) => (value === null ? "-" : value.toFixed(1));
  return [
    each("", (s) => s.name.toUpperCase()),
    each("messages sent", (s) => count(s.messages.sent)),
    each("received (all receivers)", (s) => `${s.messages.receivers > 1 ? `${s.messages.receivers} × ` : ""}${count(s.messages.received / s.messages.receivers)}`),
    each("msg/s, steady state", (s) => count(s.rate.steady)),
    each("msg/s, whole run", (s) => count(s.rate.wholeRun)),
    each("deliveries/s, steady state", (s) => count(s.rate.deliveriesSteady)),
    each("latency p50 ms", latency("p50")),
    each("latency p90 ms", latency("p90")),
    each("latency p99 ms", latency("p99")),
    each("latency max ms", latency("max")),
    each("cpu µs/msg publisher", (s) => cpu(s.cpuUsPerMessage.publisher)),
    each("cpu µs/msg receivers", (s) => cpu(s.cpuUsPerMessage.receivers)),
    report.broker.cpuMeasured ? each("cpu µs/msg broker", (s) => cpu(s.cpuUsPerMessage.broker)) : { label: "cpu µs/msg broker", all: NOT_MEASURED },
  ];
}

/** What each scenario was, and what to know about its figures. */
function notes(report: BenchReport): string[] {
  return report.scenarios.flatMap((s) => {
    const lines = [`${s.name.padEnd(8)} ${s.title}; ${count(s.messages.sent)} messages of ${s.messages.bodyBytes} bytes, the first ${count(s.messages.warmup)} warm-up`];
    if (s.rate.target !== null && s.rate.achieved !== null) lines.push(`${"".padEnd(8)} sent at ${count(s.rate.achieved)} msg/s (asked ${count(s.rate.target)})`);
    if (s.messages.duplicates > 0) lines.push(`${"".padEnd(8)} ${count(s.messages.duplicates)} duplicate deliveries`);
    const { asked, granted } = s.prefetch;
    if (asked !== null && granted !== null && granted < asked) {
      const held = granted === 1 ? "one delivery" : `${count(granted)} deliveries`;
      lines.push(
        `${"".padEnd(8)} the broker granted each consumer a prefetch of ${count(granted)} (asked ${count(asked)}): ` +
          `its \`prefetch\` setting caps it, so a consumer holds ${held} until its ack reaches the broker`,
      );
    }
    if (s.otherCores !== null && s.otherCores >= 0.25) {
      lines.push(`${"".padEnd(8)} other processes kept ${s.otherCores.toFixed(2)} cores busy meanwhile: the figures are not the machine's best`);
    }
    return lines;
  });
}

export function benchTable(report: BenchReport): string {
  const { broker } = report;
  const where = broker.startedByBench ? `a broker started by bench (${broker.durability}) on ${broker.hosts[0]}` : broker.hosts.join(", ");
  const table = rows(report);
  const cells = table.filter((row) => Array.isArray(row));
  const widths = cells[0]!.map((_, column) => Math.max(...cells.map((row) => row[column]!.length)));
  widths[0] = Math.max(widths[0]!, ...table.map((row) => (Array.isArray(row) ? 0 : row.label.length)));
  const line = (row: Row) =>
    Array.isArray(row)
      ? row.map((cell, column) => (column === 0 ? cell.padEnd(widths[0]!) : cell.padStart(widths[column]!))).join("  ").trimEnd()
      : `${row.label.padEnd(widths[0]!)}  ${row.all}`;
  return [
    `kitten-mq ${report.version} bench: ${where}; bun ${report.bun}, ${report.cores} cores`,
    `steady state = after the warm-up (the first ${report.settings.warmupShare * 100}% of each scenario's messages); ` +
    `latency = send() → handler, worst receiver; cpu = user + system per message sent`,
    "",
    ...table.map(line),
    "",
    ...notes(report),
  ].join("\n");
}
