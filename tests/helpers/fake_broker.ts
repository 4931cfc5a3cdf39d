/**
 * Brokers of a few lines, for client tests without sockets: `fakeDial(brokers)` connects a
 * `Client` to the `FakeBroker` of each host's port. A fake broker welcomes every HELLO (no
 * challenge), records every SEND it reads with the time and the link it read it on, and answers it
 * as the test's `answer` says: `ok()`, `slave()`, `refuse(code)`, or null for no answer.
 *
 * Given a `FakeMap` (shared by the fake brokers of one deployment), a fake broker belongs to a
 * group, says `map: true` in welcome, answers MAP from it, and refuses with NOT_OWNER (naming the
 * owner, its brokers and the epoch, as a real broker does) a SEND whose queue another group owns.
 */
import { decode, encode } from "../../src/protocol/cbor.ts";
import type { ErrorCode } from "../../src/protocol/errors.ts";
import { frame, FrameDecoder } from "../../src/protocol/frame.ts";
import { OP } from "../../src/protocol/ops.ts";
import type { Dial, TransportHandlers } from "../../src/client/transport.ts";

export interface SeenSend {
  ref: number;
  channel: string;
  messageId: string;
  /** performance.now() when the broker read it. */
  at: number;
  /** Which of the broker's links read it: 1 for the first accepted, 2 for the next… */
  link: number;
}

export type Answer = (send: SeenSend, index: number) => unknown[] | null;

export const ok = (): Answer => (send) => [OP.OK, [send.ref]];
export const slave = (): Answer => (send) => [OP.OK, [send.ref], "slave"];
export const refuse = (code: ErrorCode): Answer => (send) => [OP.ERROR, send.ref, code, `Cannot send to "${send.channel}": ${code} (fake)`];

/** The queue map of fake brokers: queue → owner, and each group's broker addresses. */
export interface FakeMap {
  queues: Record<string, { group: string; epoch: number }>;
  groups: Record<string, string[]>;
}

export class FakeBroker {
  readonly sends: SeenSend[] = [];
  /** The queues of each MAP request read. */
  readonly mapRequests: string[][] = [];
  /** Set with `map`: this broker's group. */
  group = "default";
  /** Set: queues follow this map (see the file comment). */
  map: FakeMap | null = null;
  /** How the broker answers the `index`th SEND it reads (0 first). */
  answer: Answer = ok();
  /** False: new connections are closed at once, as a port with nothing behind it. */
  accepting = true;
  /** Each open link, with what closes it from the broker's side. */
  readonly #links = new Map<TransportHandlers, () => void>();
  /** Links accepted so far. */
  #accepted = 0;

  constructor(readonly port: number, public role: "master" | "slave" = "master", public epoch = 0) {}

  get host(): string {
    return `127.0.0.1:${this.port}@broker-1`;
  }

  get connected(): number {
    return this.#links.size;
  }

  /** The message ids of every SEND read so far, in order. */
  get messageIds(): string[] {
    return this.sends.map((send) => send.messageId);
  }

  /** How many SENDs of each message id the broker read, by id, in the order of their first read. */
  get sendsPerId(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const { messageId } of this.sends) counts.set(messageId, (counts.get(messageId) ?? 0) + 1);
    return counts;
  }

  /** A promotion or demotion: every link is told with ROLE, as a real broker does. */
  setRole(role: "master" | "slave", epoch: number): void {
    this.role = role;
    this.epoch = epoch;
    for (const link of this.#links.keys()) link.data(frame(encode([OP.ROLE, { role, epoch, fenced: false }])));
  }

  /** Writes `op` to every open link (a push: ROLE, MAP_INFO…). */
  push(op: unknown[]): void {
    for (const link of this.#links.keys()) link.data(frame(encode(op)));
  }

  /** Every link drops, as when the broker dies. */
  drop(): void {
    for (const close of [...this.#links.values()]) close();
  }

  #notOwner(send: SeenSend): unknown[] | null {
    if (!this.map) return null;
    const queue = send.channel.split("/").slice(0, 2).join("/");
    const owner = this.map.queues[queue];
    if (!owner || owner.group === this.group) return null;
    const details = { queue, group: owner.group, brokers: this.map.groups[owner.group] ?? [], epoch: owner.epoch };
    return [OP.ERROR, send.ref, "NOT_OWNER", `Cannot serve queue "${queue}" on group "${this.group}" (fake)`, details];
  }

  accept(handlers: TransportHandlers) {
    let open = false;
    let link = 0;
    const decoder = new FrameDecoder();
    const reply = (op: unknown[]) => queueMicrotask(() => open && handlers.data(frame(encode(op))));
    const close = () => {
      if (!open) return;
      open = false;
      this.#links.delete(handlers);
      queueMicrotask(() => handlers.close(null));
    };
    queueMicrotask(() => {
      if (!this.accepting) return handlers.close(new Error("connect ECONNREFUSED (fake)"));
      open = true;
      link = ++this.#accepted;
      this.#links.set(handlers, close);
      handlers.open();
    });
    return {
      write: (bytes: Uint8Array) => {
        if (!open) return;
        for (const body of decoder.push(bytes)) {
          const op = decode(body) as unknown[];
          if (op[0] === OP.HELLO) {
            const welcome = { server: "fake", serviceId: "broker-1", protocol: 1, role: this.role, epoch: this.epoch, maxFrameSize: 1 << 20, version: "0" };
            reply([OP.WELCOME, this.map ? { ...welcome, group: this.group, map: true } : welcome]);
          } else if (op[0] === OP.MAP && this.map) {
            const queues = op[2] as string[];
            this.mapRequests.push(queues);
            const owners = Object.fromEntries(queues.filter((queue) => this.map!.queues[queue]).map((queue) => [queue, this.map!.queues[queue]!]));
            reply([OP.MAP_INFO, op[1], { epoch: 1, queues: owners, groups: this.map.groups }]);
          } else if (op[0] === OP.SEND) {
            const send = { ref: op[1] as number, channel: op[2] as string, messageId: op[3] as string, at: performance.now(), link };
            this.sends.push(send);
            const refused = this.#notOwner(send);
            const answer = refused ?? this.answer(send, this.sends.length - 1);
            if (answer) reply(answer);
          }
        }
      },
      close,
    };
  }
}

/** A Dial that reaches the fake broker listening on the host's port. */
export function fakeDial(brokers: FakeBroker[]): Dial {
  return (_host, port, _tls, handlers) => {
    const broker = brokers.find((candidate) => candidate.port === port);
    if (!broker) throw new Error(`no fake broker on port ${port}`);
    return broker.accept(handlers);
  };
}
