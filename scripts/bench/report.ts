/** The benchmark's tables: number formats, one row per run, medians, and where the CPU went. */
import { type Cpu, cpuTotal } from "./processes.ts";
import { fmt, type Median, ms, type RunResult } from "../../src/bench/results.ts";

export { fmt, ms };

const HEADER = [
  "run",
  "rate",
  "confirms/s",
  "p50 ms",
  "p99 ms",
  "max ms",
  "wall s",
  "cpu s broker/pub/recv",
  "others",
  "dup",
  "note",
];

export function row(label: string, r: Median & { note?: string }): string[] {
  const c = r.cpu;
  const cpu = `${cpuTotal(c.broker).toFixed(2)} / ${cpuTotal(c.publisher).toFixed(2)} / ${
    cpuTotal(c.receivers).toFixed(2)
  }`;
  const others = `${r.otherCores.toFixed(2)} cores`;
  return [
    label,
    fmt(r.rate),
    fmt(r.confirmRate),
    ms(r.p50),
    ms(r.p99),
    ms(r.max),
    r.elapsedS.toFixed(2),
    cpu,
    others,
    String(r.duplicates),
    r.note ?? "",
  ];
}

export function table(rows: string[][]): string {
  const widths = HEADER.map((_, i) => Math.max(...[HEADER, ...rows].map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    "  " +
    cells.map((cell, i) => (i === 0 || i >= cells.length - 1 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!)))
      .join("  ").trimEnd();
  return [line(HEADER), ...rows.map(line)].join("\n");
}

/** Where the CPU went: µs per delivered message for each process kind, and cores kept busy. */
export function cpuLine(m: Median): string {
  const per = (cpu: Cpu) => {
    const total = cpuTotal(cpu);
    return `${((total / m.deliveries) * 1e6).toFixed(1)} µs (${Math.round((cpu.system / total) * 100)}% sys)`;
  };
  const busy = (cpuTotal(m.cpu.broker) + cpuTotal(m.cpu.publisher) + cpuTotal(m.cpu.receivers)) / m.elapsedS;
  return `CPU per delivery: broker ${per(m.cpu.broker)}, publisher ${per(m.cpu.publisher)}, ` +
    `receivers ${per(m.cpu.receivers)}; ${busy.toFixed(2)} of ${navigator.hardwareConcurrency} cores busy`;
}

export function median(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export function medianOf(runs: RunResult[]): Median {
  const m = (pick: (r: RunResult) => number) => median(runs.map(pick));
  return {
    rate: m((r) => r.rate),
    wholeRunRate: m((r) => r.wholeRunRate),
    confirmRate: m((r) => r.confirmRate),
    p50: m((r) => r.p50),
    p90: m((r) => r.p90),
    p99: m((r) => r.p99),
    max: m((r) => r.max),
    confirmP99: runs.every((r) => r.confirmP99 !== null) ? m((r) => r.confirmP99!) : null,
    elapsedS: m((r) => r.elapsedS),
    duplicates: m((r) => r.duplicates),
    failedSends: m((r) => r.failedSends),
    deliveries: m((r) => r.deliveries),
    otherCores: m((r) => r.otherCores),
    cpu: {
      broker: { user: m((r) => r.cpu.broker.user), system: m((r) => r.cpu.broker.system) },
      publisher: { user: m((r) => r.cpu.publisher.user), system: m((r) => r.cpu.publisher.system) },
      receivers: { user: m((r) => r.cpu.receivers.user), system: m((r) => r.cpu.receivers.system) },
    },
  };
}
