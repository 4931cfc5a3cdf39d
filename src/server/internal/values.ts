/** Small helpers on untrusted values (config files, message bodies), shared by config and schema. */

/** An object that is not an array, a byte string, a Date or a class instance. */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** A value as it appears in a problem message: JSON where it can be, cut to 60 characters. */
export function show(value: unknown): string {
  if (value === undefined) return "undefined";
  if (typeof value === "number" || typeof value === "bigint") return String(value); // NaN, Infinity, 1n
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value); // a cycle: callers also take values that are not JSON
  }
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}
