/**
 * A client Dial that records every frame each link wrote and read, decoded, with the broker port
 * it went to or came from, and filters over that log (routing tests look into what went where).
 */
import { type Dial, dialTcp } from "../../src/client/transport.ts";
import { decode, FrameDecoder, OP } from "../../src/protocol/mod.ts";

/** One frame a tapped client wrote to (`out`) or read from (`in`) the broker on `port`. */
export interface Tapped {
  port: number;
  dir: "in" | "out";
  frame: unknown[];
}

/** A Dial over real TCP that records every frame, decoded. */
export function tap(log: Tapped[]): Dial {
  return (host, port, tls, handlers) => {
    const record = (decoder: FrameDecoder, dir: Tapped["dir"], bytes: Uint8Array) => {
      for (const body of decoder.push(bytes)) {
        try {
          const frame = decode(body);
          if (Array.isArray(frame)) log.push({ port, dir, frame });
        } catch {
          // not a frame this test looks at
        }
      }
    };
    const fromBroker = new FrameDecoder(64 * 1024 * 1024);
    const toBroker = new FrameDecoder(64 * 1024 * 1024);
    const transport = dialTcp(host, port, tls, {
      open: () => handlers.open(),
      data: (chunk) => {
        record(fromBroker, "in", chunk);
        handlers.data(chunk);
      },
      close: (error) => handlers.close(error),
    });
    return {
      write(bytes) {
        record(toBroker, "out", bytes);
        transport.write(bytes);
      },
      close: () => transport.close(),
    };
  };
}

/** SEND frames written to `port` for channels of `queue`. */
export function sendsTo(log: Tapped[], port: number, queue: string): unknown[][] {
  return log.filter((t) => t.dir === "out" && t.port === port && t.frame[0] === OP.SEND && String(t.frame[2]).startsWith(`${queue}/`))
    .map((t) => t.frame);
}

/** ERROR frames with `code` read from `port`. */
export function errorsFrom(log: Tapped[], port: number, code: string): unknown[][] {
  return log.filter((t) => t.dir === "in" && t.port === port && t.frame[0] === OP.ERROR && t.frame[2] === code).map((t) => t.frame);
}

/** MAP_INFO pushes (ref null) that name `queue` on `group`. */
export function pushesOf(log: Tapped[], queue: string, group: string): Tapped[] {
  return log.filter((t) =>
    t.dir === "in" && t.frame[0] === OP.MAP_INFO && t.frame[1] === null &&
    (t.frame[2] as { queues?: Record<string, { group: string }> }).queues?.[queue]?.group === group
  );
}
