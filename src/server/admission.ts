/**
 * Whether a send is taken, and how it is made safe: the checks every send passes (soft-stop, the
 * channel's route, write rules, the queue map, a resend of a message already taken, the format,
 * a full queue, a full disk), then the intake that numbers and stores it and the replication that
 * copies it to the in-sync slaves. The broker hands every SEND here (broker.send).
 */
import { KittenError } from "../protocol/mod.ts";
import type { Cluster } from "./cluster/cluster.ts";
import type { Intake } from "./intake.ts";
import type { Placement } from "./placement.ts";
import { conform, type Routes } from "./routes.ts";
import { notAllowed, type Rules } from "./security/rules.ts";
import type { DiskFloor } from "./store/disk_floor.ts";
import type { Store } from "./store/store.ts";
import type { Peer } from "./peer.ts";
import type { Moves } from "./move/moves.ts";
import type { Queue } from "./queue/queue.ts";
import type { AppendOp } from "../protocol/peer_ops.ts";

/** What `send` needs to know of the sender: a connection, or the admin API publishing. */
export type Sender = Pick<Peer, "clientId" | "grants">;

export interface AdmissionHost {
  readonly stopping: boolean;
  readonly isMaster: boolean;
  readonly rules: Rules;
  readonly routes: Routes;
  readonly placement: Placement;
  readonly intake: Intake;
  readonly cluster: Cluster;
  readonly disk: DiskFloor | null;
  readonly store: Store | null;
  readonly moves: Moves;
  now(): number;
}

/**
 * Accepts a message. Returns nothing when it is safe (or a promise that settles when it is);
 * throws a KittenError when it is refused. A message id seen recently is accepted again without
 * being queued twice: the sender resent it after a reconnect.
 */
export function admit(host: AdmissionHost, channelName: string, messageId: string, body: Uint8Array, sender: Sender): void | Promise<void> {
  if (host.stopping) throw new KittenError("STOPPING", `Cannot send to "${channelName}": the broker is stopping`);
  const route = host.routes.of(channelName);
  const { endpoint, version, destination } = route;
  const rules = host.rules;
  if (!rules.isOpen && !sender.grants.canWrite(endpoint, version, destination)) {
    throw notAllowed(sender.clientId, "send", channelName);
  }
  // A queue used for the first time is placed on a group first (queue map, etcd).
  if (route.unplaced !== undefined) {
    return host.placement.place(route.unplaced).then(() => admit(host, channelName, messageId, body, sender));
  }
  const { queue, schema } = route;
  const intake = host.intake;
  // A resend of an accepted message is confirmed before anything is paid for it (its format
  // was checked the first time); one being committed is confirmed with that commit.
  const resent = intake.resent(messageId);
  if (resent !== false) {
    if (!host.isMaster) return resent === true ? undefined : resent;
    if (resent === true && intake.isUnlogged(messageId)) {
      // Streamed as the first send was stored: in its channel's format.
      const stored = schema ? conform(schema, channelName, queue.name, body) : body;
      return intake.streamResend(channelName, intake.create(messageId, queue, destination, stored, host.now()));
    }
    return intake.confirmHeld(channelName, resent);
  }
  if (schema) body = conform(schema, channelName, queue.name, body);
  const held = queue.held;
  if (held >= queue.settings.maxMessagesPerQueue) {
    throw new KittenError(
      "QUEUE_FULL",
      `Cannot send to "${channelName}": queue "${queue.name}" holds ${held} messages (maxMessagesPerQueue)`,
    );
  }
  checkDisk(host, queue, channelName);
  const master = host.isMaster;
  const replication = host.cluster.replication;
  if (master) replication.checkReplicas(channelName);
  const moves = host.moves;
  const moving = moves.outgoing.size > 0;
  if (moving && moves.fenced(queue.name)) {
    throw new KittenError("QUEUE_MOVING", `Cannot take a send to "${channelName}" now: queue "${queue.name}" is switching to another group; send it again`);
  }
  const message = intake.create(messageId, queue, destination, body, host.now());
  moves.clientSends++;
  if (moving) moves.appended(message);
  // Replicas store it while this broker does: the two commits overlap.
  const index = master ? replication.append(message) : 0;
  if (!master) intake.noteUnlogged(messageId);
  const stored = intake.store(queue, message, index);
  const replicated = master ? replication.waitFor(index, channelName) : undefined;
  if (replicated === undefined) return stored;
  return intake.confirmedWhen(messageId, stored, replicated);
}

/**
 * Takes a message a queue move streams in (move/incoming.ts), on the target group's master: no
 * rules, format or bound (the source checked them when it took the message), stored and
 * replicated like a send. A message the queue holds already (streamed twice) is not queued again;
 * a delay (`delayMs`, a requeue nacked with one on the source) applies to it either way.
 * `mayBeHeld`: written again after the source linked again, so looked for in the store too.
 */
export function admitMoved(host: AdmissionHost, queue: Queue, append: AppendOp, delayMs = 0, mayBeHeld = false): void | Promise<void> {
  const [, , messageId, , destination, body, created, deliveries, deadLetter] = append;
  const { intake, moves } = host;
  // Only what this queue holds now counts as a duplicate: the recent ids of the whole broker may
  // name a message it held before (a queue moving back) or take a gap for seen (they expect ids
  // in send order; a move streams the snapshot and the live queue interleaved).
  const storing = intake.storingMessage(messageId);
  const held = storing ?? moves.incomingMirror(queue.name)?.get(messageId);
  if (held) {
    if (delayMs > 0) {
      held.notBefore = host.now() + delayMs;
      // A message being stored has its INSERT still to run, which writes the delay; a stored one an UPDATE.
      if (!storing) intake.storeFor(queue)?.noteDelay(held.record ?? held, held.notBefore);
      host.cluster.replication.requeued(messageId, held.deliveries, held.notBefore); // this group's slaves hold it back too
    }
    return intake.commitOf(messageId); // undefined for a message held already
  }
  // A delayed message sent again at the fence, or one written again after the source linked
  // again, that the target holds in its store only (it pages too): not stored twice, and a delay
  // does not reach it. Looked up for these few only: a store read per streamed message would
  // slow every move into a queue that pages.
  if ((delayMs > 0 || mayBeHeld) && queue.backlog.count > 0 && intake.whereIs(messageId) === "paged") return;
  const channelName = `${queue.name}/${destination}`;
  checkDisk(host, queue, channelName); // a disk below its floor refuses the move (rolled back)
  const replication = host.cluster.replication;
  replication.checkReplicas(channelName);
  const message = intake.create(messageId, queue, destination, body, created);
  message.deliveries = deliveries;
  message.deadLetter = deadLetter ?? null;
  if (delayMs > 0) message.notBefore = host.now() + delayMs;
  const index = replication.append(message);
  if (delayMs > 0) replication.requeued(messageId, deliveries, message.notBefore); // told after its APPEND
  const stored = intake.store(queue, message, index);
  const replicated = replication.waitFor(index, channelName);
  if (replicated === undefined) return stored;
  return intake.storedAndReplicated(stored, replicated);
}

/** A durable queue's message is refused while the disk is below its floor or the store refuses writes (DISK_FULL, STORE_UNAVAILABLE). */
function checkDisk(host: AdmissionHost, queue: Queue, channelName: string): void {
  if (queue.settings.durability === "memory") return;
  if (host.disk?.low) throw host.disk.refusal(channelName);
  const refused = host.store?.refusal?.(channelName);
  if (refused) throw refused;
}
