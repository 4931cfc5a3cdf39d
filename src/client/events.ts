/**
 * How a client tells its user what happened (`EventEmitter` events), without ever throwing into
 * the code that noticed it: a link's frame handler, a reconnect, a NACK.
 */
import type { EventEmitter } from "node:events";

/**
 * Emits a lifecycle event ('connect', 'disconnect', 'master'). A listener that throws is reported,
 * not thrown into the link's code: what comes after the event there (registrations and resends on
 * a new link, the reconnect of a lost one) must run whatever the listener does.
 */
export function tell(emitter: EventEmitter, event: string, ...args: unknown[]): void {
  try {
    emitter.emit(event, ...args);
  } catch (error) {
    report(emitter, asError(error));
  }
}

/** Tells the user through 'error', when someone listens. Never throws: its callers go on. */
export function report(emitter: EventEmitter, error: Error): void {
  if (emitter.listenerCount("error") === 0) return;
  try {
    emitter.emit("error", error);
  } catch (thrown) {
    // An 'error' listener that throws leaves only the console to tell: emitting 'error' again
    // would loop, and throwing would skip what the caller does next.
    console.error("kitten-mq: an 'error' listener threw while reporting", error, thrown);
  }
}

export function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
