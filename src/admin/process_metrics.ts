/**
 * The `process_*` metrics every Prometheus exporter gives (the names of the client libraries'
 * defaults, so stock dashboards and alerts work), plus the JavaScript heap. Linux's /proc gives
 * open and maximum fds and virtual memory; elsewhere those lines are left out rather than
 * invented.
 */
import { readdirSync, readFileSync } from "node:fs";
import type { Exposition } from "./exposition.ts";

/** Unix time the process started, in seconds (the epoch of its performance clock). */
const START_TIME_SECONDS = performance.timeOrigin / 1000;

export function writeProcessMetrics(out: Exposition): void {
  const cpu = process.cpuUsage();
  const memory = process.memoryUsage();
  out.metric("process_cpu_user_seconds_total", "counter", "User CPU time spent in seconds", [[{}, cpu.user / 1e6]]);
  out.metric("process_cpu_system_seconds_total", "counter", "System CPU time spent in seconds", [[{}, cpu.system / 1e6]]);
  out.metric("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds", [[{}, (cpu.user + cpu.system) / 1e6]]);
  out.metric("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds", [[{}, Math.round(START_TIME_SECONDS)]]);
  out.metric("process_resident_memory_bytes", "gauge", "Resident memory size in bytes", [[{}, memory.rss]]);
  const virtual = virtualMemoryBytes();
  if (virtual !== null) out.metric("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes", [[{}, virtual]]);
  const open = openFds();
  if (open !== null) out.metric("process_open_fds", "gauge", "Number of open file descriptors", [[{}, open]]);
  const max = maxFds();
  if (max !== null) out.metric("process_max_fds", "gauge", "Maximum number of open file descriptors", [[{}, max]]);
  out.metric("kitten_mq_runtime_heap_used_bytes", "gauge", "JavaScript heap in use, in bytes", [[{}, memory.heapUsed]]);
  out.metric("kitten_mq_runtime_heap_size_bytes", "gauge", "JavaScript heap reserved, in bytes", [[{}, memory.heapTotal]]);
  out.metric("kitten_mq_runtime_external_memory_bytes", "gauge", "Memory of buffers and native objects outside the JavaScript heap, in bytes", [
    [{}, memory.external],
  ]);
}

function openFds(): number | null {
  try {
    return readdirSync("/proc/self/fd").length - 1; // less the descriptor reading the directory
  } catch {
    return null;
  }
}

function maxFds(): number | null {
  try {
    const line = readFileSync("/proc/self/limits", "utf8").split("\n").find((l) => l.startsWith("Max open files"));
    const soft = line?.split(/\s{2,}/)[1];
    return soft === undefined || soft === "unlimited" ? null : Number(soft);
  } catch {
    return null;
  }
}

function virtualMemoryBytes(): number | null {
  try {
    const match = /^VmSize:\s+(\d+) kB$/m.exec(readFileSync("/proc/self/status", "utf8"));
    return match ? Number(match[1]) * 1024 : null;
  } catch {
    return null;
  }
}
