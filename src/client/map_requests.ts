/**
 * MAP requests of one group's client (brokers with `cluster.etcd`): where queues live. Each is
 * sent to every open link and to the next one to open; the first answer settles it.
 */
import { type KittenError, OP } from "../protocol/mod.ts";
import type { HostConnection } from "./connection.ts";

/** What MAP_INFO says (PROTOCOL.md): the map epoch, owners of queues, every group's brokers. */
export interface MapView {
  epoch: number;
  queues: Record<string, { group: string; epoch: number }>;
  groups: Record<string, string[]>;
}

interface PendingMap {
  op: unknown[];
  resolve(view: MapView): void;
  reject(error: KittenError): void;
}

export class MapRequests {
  readonly #pending = new Map<number, PendingMap>();

  ask(ref: number, queues: string[], connections: readonly HostConnection[]): Promise<MapView> {
    const op = [OP.MAP, ref, queues];
    return new Promise<MapView>((resolve, reject) => {
      this.#pending.set(ref, { op, resolve, reject });
      for (const connection of connections) if (connection.isOpen) connection.send(op);
    });
  }

  /** A link opened: it is asked too. */
  replay(connection: HostConnection): void {
    for (const { op } of this.#pending.values()) connection.send(op);
  }

  /** True when `ref` was a MAP request (now settled). */
  settle(ref: number, view: MapView | null, error: KittenError | null): boolean {
    const pending = this.#pending.get(ref);
    if (!pending) return false;
    this.#pending.delete(ref);
    if (error) pending.reject(error);
    else pending.resolve(view!);
    return true;
  }

  rejectAll(error: KittenError): void {
    for (const pending of this.#pending.values()) pending.reject(error);
    this.#pending.clear();
  }
}
