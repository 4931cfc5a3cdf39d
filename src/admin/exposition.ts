/**
 * The Prometheus text format (version 0.0.4), written line by line: `# HELP`, `# TYPE`, then
 * samples. Shared by GET /metrics and GET /statistics.
 */

export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export type Kind = "counter" | "gauge";
export type Sample = [labels: Record<string, string>, value: number];

export class Exposition {
  #lines: string[] = [];

  metric(name: string, kind: Kind, help: string, samples: Sample[]): void {
    this.#lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${kind}`);
    for (const [labels, value] of samples) this.#lines.push(`${name}${formatLabels(labels)} ${formatValue(value)}`);
  }

  /** A histogram: cumulative `_bucket{le}` lines ending with `+Inf`, then `_sum` and `_count`. */
  histogram(name: string, help: string, buckets: [bound: number, count: number][], sum: number, count: number): void {
    this.#lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
    for (const [bound, running] of buckets) this.#lines.push(`${name}_bucket{le="${formatValue(bound)}"} ${running}`);
    this.#lines.push(`${name}_sum ${formatValue(sum)}`, `${name}_count ${count}`);
  }

  toString(): string {
    return this.#lines.join("\n") + "\n";
  }
}

/** `{queue="orders/v1"}`; values escaped as the format requires (backslash, quote, newline). */
export function formatLabels(labels: Record<string, string>): string {
  const parts = Object.entries(labels).map(([key, value]) =>
    `${key}="${value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`
  );
  return parts.length === 0 ? "" : `{${parts.join(",")}}`;
}

export function formatValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (!Number.isFinite(value)) return value > 0 ? "+Inf" : "-Inf";
  if (Number.isInteger(value)) return String(value);
  // Small values (latencies in seconds) keep their significant digits; larger ones 3 decimals.
  return Math.abs(value) < 1 ? String(Number(value.toPrecision(6))) : String(Math.round(value * 1000) / 1000);
}
