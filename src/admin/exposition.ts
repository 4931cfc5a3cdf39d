/**
 * The Prometheus text format (version 0.0.4), written line by line: `# HELP`, `# TYPE`, then
 * samples. Shared by GET /metrics and GET /statistics.
 */
import { handlerCounts, type Queue } from "../server/mod.ts";

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

/**
 * The shape of each queue: copies by state (under `depthName`, which differs between the 0.12
 * names of GET /statistics and the Prometheus ones of GET /metrics), consumers and listeners.
 */
export function writeQueueShape(out: Exposition, queues: readonly Queue[], depthName: string): void {
  const depths = queues.map((q) => [q.name, q.depth()] as const);
  out.metric(
    depthName,
    "gauge",
    "Copies in a queue by state: ready (to deliver), inflight (unacked), delayed (nacked with a delay), waiting (no recipient yet)",
    depths.flatMap(([queue, depth]) =>
      (["ready", "inflight", "delayed", "waiting"] as const).map((state): Sample => [{ queue, state }, depth[state]])
    ),
  );
  const counts = queues.map((q) => [q.name, handlerCounts(q)] as const);
  out.metric("kitten_mq_queue_consumers", "gauge", "Consumer registrations on a queue", counts.map(([queue, c]) => [{ queue }, c.consumers]));
  out.metric("kitten_mq_queue_listeners", "gauge", "Listening client ids on a queue", counts.map(([queue, c]) => [{ queue }, c.listeners]));
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
