/**
 * Readable output: aligned tables, numbers with separators, durations. No colours: the output
 * goes to terminals, logs and pipes alike.
 */

type Cell = string | number | null | undefined;

/** An aligned table; numbers are right-aligned, text left-aligned, the header in capitals. */
export function table(headers: string[], rows: Cell[][]): string {
  const shown = rows.map((row) => row.map((cell) => (typeof cell === "number" ? count(cell) : cell ?? "-")));
  const numeric = headers.map((_, column) => rows.length > 0 && rows.every((row) => typeof row[column] === "number"));
  const widths = headers.map((header, column) => Math.max(header.length, ...shown.map((row) => row[column]!.length)));
  const line = (cells: string[]) =>
    cells.map((cell, column) => (numeric[column] ? cell.padStart(widths[column]!) : cell.padEnd(widths[column]!)))
      .join("  ").trimEnd();
  return [line(headers.map((header) => header.toUpperCase())), ...shown.map(line)].join("\n");
}

export function count(value: number): string {
  return value.toLocaleString("en-US");
}

/** Events per second, one decimal below 100. */
export function perSecond(value: number): string {
  return `${value >= 100 ? Math.round(value).toLocaleString("en-US") : (Math.round(value * 10) / 10).toFixed(1)}/s`;
}

/** `3d 04:05:06`: days, then hours modulo 24, minutes and seconds. */
export function duration(seconds: number): string {
  const s = Math.floor(seconds);
  const days = Math.floor(s / 86400);
  const clock = [Math.floor((s % 86400) / 3600), Math.floor((s % 3600) / 60), s % 60]
    .map((n) => String(n).padStart(2, "0")).join(":");
  return days > 0 ? `${days}d ${clock}` : clock;
}

export function json(value: unknown): string {
  return JSON.stringify(value, null, 2);
}
