/**
 * A leveled logger. Lines look like 0.12's, so existing log filters still match:
 * `[info ] [queue    ] key=value;…`. The sink is
 * injectable so tests stay quiet and can assert on what was logged.
 */
export const LEVELS = { debug: 1, info: 2, warn: 3, error: 4 } as const;
export type Level = keyof typeof LEVELS;

export type LogSink = (level: Level, line: string) => void;

const consoleSink: LogSink = (level, line) => {
  if (level === "error" || level === "warn") console.error(line);
  else console.log(line);
};

export class Logger {
  constructor(public minLevel = 2, readonly sink: LogSink = consoleSink) {}

  log(level: Level, namespace: string, message: string): void {
    if (LEVELS[level] < this.minLevel) return;
    this.sink(level, `[${level.padEnd(5)}] [${namespace.padEnd(9)}] ${message}`);
  }
  debug(namespace: string, message: string): void {
    this.log("debug", namespace, message);
  }
  info(namespace: string, message: string): void {
    this.log("info", namespace, message);
  }
  warn(namespace: string, message: string): void {
    this.log("warn", namespace, message);
  }
  error(namespace: string, message: string): void {
    this.log("error", namespace, message);
  }
  /** A bug caught where it must not escape (a socket callback, a timer, a promise chain): its stack. */
  failure(namespace: string, context: string, error: unknown): void {
    this.log("error", namespace, `${context};${(error as Error)?.stack ?? error}`);
  }
}

/** A logger that keeps its lines in memory (tests). */
export function memoryLogger(minLevel = 1): Logger & { lines: string[] } {
  const lines: string[] = [];
  const logger = new Logger(minLevel, (_level, line) => lines.push(line)) as Logger & { lines: string[] };
  logger.lines = lines;
  return logger;
}
