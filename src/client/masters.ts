/**
 * Which broker is master, across a client's hosts. A master with a higher epoch than any seen is
 * the new one; a master below the highest epoch seen is an old master that came back without
 * being demoted: it is told (FENCE) and its deliveries and confirmations are refused. Two masters
 * with the same epoch are reported. Epochs are compared within a group only (`welcome.group`): a
 * client's links may reach several groups (a seed list), each with its own master and epochs.
 */
import { KittenError, OP } from "../protocol/mod.ts";
import type { HostConnection } from "./connection.ts";

export interface MasterEvents {
  /** A new master (higher epoch) was seen. */
  master(host: string, epoch: number): void;
  /** FENCED or TWO_MASTERS. */
  problem(error: KittenError): void;
}

export interface HostStatus {
  host: string;
  connected: boolean;
  role: "master" | "slave" | null;
  epoch: number | null;
  /** The broker this client takes deliveries and confirmations from. */
  master: boolean;
  /** The broker's `cluster.group` (null before welcome, or from a broker that predates groups). */
  group: string | null;
}

interface Highest {
  epoch: number;
  label: string | null;
}

export class MasterTracker {
  /** Per group: the highest master epoch seen on its hosts, and that host. */
  readonly #highest = new Map<string, Highest>();

  constructor(readonly connections: () => readonly HostConnection[], readonly events: MasterEvents) {}

  /** True for an open connection to a master that is not fenced. */
  isMaster(connection: HostConnection): boolean {
    const welcome = connection.welcome;
    return connection.isOpen && welcome !== null && welcome.role === "master" && (welcome.epoch ?? 0) >= this.#of(connection).epoch;
  }

  #of(connection: HostConnection): Highest {
    const group = connection.welcome?.group ?? "";
    let highest = this.#highest.get(group);
    if (!highest) this.#highest.set(group, highest = { epoch: -1, label: null });
    return highest;
  }

  #sameGroup(a: HostConnection, b: HostConnection): boolean {
    return (a.welcome?.group ?? "") === (b.welcome?.group ?? "");
  }

  /** Looks at a connection's role after its welcome or a ROLE change. */
  check(connection: HostConnection): void {
    const welcome = connection.welcome;
    const highest = this.#of(connection);
    // A slave learns the highest epoch seen: promoted later, it must go above it.
    if (welcome?.role === "slave" && highest.epoch > (welcome.epoch ?? 0)) this.#tellEpoch(connection);
    if (!welcome || welcome.role !== "master") return;
    const epoch = welcome.epoch ?? 0;
    if (epoch > highest.epoch) {
      highest.epoch = epoch;
      highest.label = connection.host.label;
      this.events.master(connection.host.label, epoch);
      for (const other of this.connections()) {
        if (other === connection || !other.isOpen || !this.#sameGroup(other, connection)) continue;
        if (other.role === "master") this.check(other);
        else this.#tellEpoch(other);
      }
      return;
    }
    if (epoch < highest.epoch) {
      this.#tellEpoch(connection);
      this.events.problem(
        new KittenError(
          "FENCED",
          `Cannot follow "${connection.host.label}" as master: it claims epoch ${epoch}, but "${highest.label}" is master ` +
            `with epoch ${highest.epoch}; its deliveries are refused`,
        ),
      );
      return;
    }
    const rival = this.connections().find((c) =>
      c !== connection && c.isOpen && c.role === "master" && c.welcome!.epoch === epoch && this.#sameGroup(c, connection)
    );
    if (rival) {
      this.events.problem(
        new KittenError(
          "TWO_MASTERS",
          `Cannot choose a master: "${connection.host.label}" and "${rival.host.label}" both claim epoch ${epoch}; ` +
            `demote one of them (isMaster false, then reload)`,
        ),
      );
    }
  }

  /**
   * Why no broker can confirm a send to `channel` now, or null when a master this client follows
   * is connected: no link is open (CONNECTION_LOST), the only master is fenced (FENCED), or every
   * broker connected is a slave (NOT_MASTER). Each is a refusal that waiting fixes.
   */
  whyNoMaster(channel: string): KittenError | null {
    const open = this.connections().filter((connection) => connection.isOpen);
    if (open.some((connection) => this.isMaster(connection))) return null;
    const action = `Cannot send to "${channel}"`;
    if (open.length === 0) {
      const away = this.connections().map((connection) => `"${connection.host.label}"`).join(", ");
      return new KittenError("CONNECTION_LOST", `${action}: no broker is connected${away ? ` (${away} away)` : ""}`);
    }
    const fenced = open.find((connection) => connection.role === "master");
    if (fenced) {
      const highest = this.#of(fenced);
      return new KittenError(
        "FENCED",
        `${action}: "${fenced.host.label}" claims master with epoch ${fenced.welcome!.epoch ?? 0}, below epoch ${highest.epoch} ` +
          `of "${highest.label}", which is not connected`,
      );
    }
    const slaves = open.map((connection) => `"${connection.host.label}"`).join(", ");
    return new KittenError("NOT_MASTER", `${action}: no broker connected is master (${slaves} ${open.length === 1 ? "is a slave" : "are slaves"})`);
  }

  /** FENCE carries the highest epoch: an old master stops delivering, a slave remembers it. */
  #tellEpoch(connection: HostConnection): void {
    const highest = this.#of(connection);
    connection.send([OP.FENCE, { epoch: highest.epoch, master: highest.label ?? "" }]);
  }

  status(): HostStatus[] {
    return this.connections().map((connection) => ({
      host: connection.host.label,
      connected: connection.isOpen,
      role: connection.role,
      epoch: connection.welcome?.epoch ?? null,
      master: this.isMaster(connection),
      group: connection.welcome?.group ?? null,
    }));
  }
}
