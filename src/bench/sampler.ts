/**
 * CPU counters of several processes sampled through a run (/proc, every `everyMs`), so that the
 * CPU spent in a window of it can be read afterwards: the scale-out scenario takes the brokers' CPU
 * after the warm-up only, because each broker process pays its own JIT compilation, a cost that
 * grows with the number of processes and not with the messages.
 */
import { type Cpu, cpuTimes, cpuTotal } from "./processes.ts";

/** One reading: when (the workers' clock: timeOrigin + now, ms) and the CPU seconds so far. */
interface Sample {
  at: number;
  cpu: number;
}

export class CpuSampler {
  readonly #samples = new Map<number, Sample[]>();
  #timer: ReturnType<typeof setInterval> | null = null;
  #reading: Promise<void> = Promise.resolve();

  /** `pids()` is asked at every tick: processes that start during the run are sampled from then on. */
  constructor(readonly pids: () => number[], readonly everyMs = 20) {}

  start(): void {
    void this.#tick();
    this.#timer = setInterval(() => void this.#tick(), this.everyMs);
  }

  /** Stops sampling after one last reading. */
  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.#reading;
    await this.#tick();
  }

  /**
   * CPU seconds `pid` used between `from` and `to` (the workers' clock), interpolated between
   * the readings around each end; a process not running at an end counts from its first reading
   * or up to its last. NaN when it was never read.
   */
  between(pid: number, from: number, to: number): number {
    const samples = this.#samples.get(pid);
    if (!samples || samples.length === 0) return NaN;
    return at(samples, to) - at(samples, from);
  }

  #tick(): Promise<void> {
    this.#reading = this.#reading.then(async () => {
      const pids = this.pids();
      const readings: Cpu[] = await Promise.all(pids.map(cpuTimes));
      const now = performance.timeOrigin + performance.now();
      pids.forEach((pid, i) => {
        const cpu = cpuTotal(readings[i]!);
        if (!Number.isFinite(cpu)) return; // exited: its last reading stands
        const list = this.#samples.get(pid) ?? [];
        list.push({ at: now, cpu });
        this.#samples.set(pid, list);
      });
    });
    return this.#reading;
  }
}

/** The CPU at `time`, linear between the two readings around it; before the first or after the last, that reading. */
function at(samples: Sample[], time: number): number {
  if (time <= samples[0]!.at) return samples[0]!.cpu;
  const last = samples[samples.length - 1]!;
  if (time >= last.at) return last.cpu;
  const hi = samples.findIndex((s) => s.at >= time);
  const a = samples[hi - 1]!;
  const b = samples[hi]!;
  return a.cpu + ((b.cpu - a.cpu) * (time - a.at)) / (b.at - a.at || 1);
}
