/**
 * What a broker tells its clients without being asked, or once at welcome: who it is, its role
 * and epoch, that it stops, where queues live. One place builds each frame, so a session only
 * decides when to send it.
 */
import { OP, type RoleInfo, type WelcomeInfo } from "../protocol/mod.ts";
import { PROTOCOL_VERSION, VERSION } from "../version.ts";
import type { Broker } from "./broker.ts";
import type { MapView } from "./cluster/queue_map.ts";
import type { ClientGrants } from "./security/rules.ts";

export function welcomeFrame(broker: Broker): unknown[] {
  const config = broker.config;
  const info: WelcomeInfo = {
    server: config.serviceId,
    serviceId: config.serviceId,
    protocol: PROTOCOL_VERSION,
    role: broker.role,
    epoch: broker.epoch,
    maxFrameSize: config.socketServer.maxFrameSize,
    version: VERSION,
    replicates: broker.cluster.replicates,
    group: config.cluster.group,
  };
  // Only brokers that spread queues over groups say so: a client then asks MAP where each queue lives.
  if (broker.placement.enabled) info.map = true;
  return [OP.WELCOME, info];
}

/** The broker's role and epoch (after a promotion, demotion or fencing). */
export function roleFrame(broker: Broker): unknown[] {
  const role: RoleInfo = { role: broker.role, epoch: broker.epoch, fenced: broker.fencedBy !== null, replicates: broker.cluster.replicates };
  return [OP.ROLE, role];
}

/** Soft-stop: an ERROR STOPPING that answers no request; sends are refused from now on and the client keeps them. */
export const STOPPING_FRAME: readonly unknown[] = [
  OP.ERROR,
  null,
  "STOPPING",
  "Cannot take new sends: the broker is stopping; it closes once deliveries in flight are done",
];

/** [MAP_INFO, ref, view]: an answer to MAP, or (ref null) owners that changed, pushed to clients that asked. */
export function mapFrame(ref: number | null, view: MapView): unknown[] {
  return [OP.MAP_INFO, ref, view];
}

/** Owners of `queues` that changed, told to a client: only the queues it may read or write (as MAP answers). */
export function mapPush(broker: Broker, grants: ClientGrants, queues: readonly string[]): unknown[] {
  const visible = broker.rules.isOpen ? queues : queues.filter((queue) => {
    const [endpoint, version] = queue.split("/") as [string, string];
    return grants.canUse(endpoint, version);
  });
  return mapFrame(null, broker.placement.known(visible));
}
