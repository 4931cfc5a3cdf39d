import { expect } from "bun:test";
import { KittenError } from "../../src/protocol/errors.ts";

/** Runs `fn`, which must throw a KittenError, and returns it (the test then checks its code). */
export function thrown(fn: () => unknown): KittenError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(KittenError);
    return error as KittenError;
  }
  throw new Error("expected a KittenError, got none");
}

/** Awaits `fn()`, which must reject with a KittenError, and returns it. */
export async function thrownAsync(fn: () => Promise<unknown>): Promise<KittenError> {
  try {
    await fn();
  } catch (error) {
    expect(error).toBeInstanceOf(KittenError);
    return error as KittenError;
  }
  throw new Error("expected a KittenError, got none");
}
