/**
 * Checks who connects: a client's or a peer broker's proof at hello, against the keys pinned on
 * first connection. Clients and peers are pinned in separate folders, so that a client that takes
 * a peer's serviceId as its id first can never pass for that peer.
 */
import { join } from "node:path";
import { KittenError } from "../../protocol/errors.ts";
import type { AuthProof } from "../../protocol/ops.ts";
import type { Config } from "../config/config.ts";
import type { Logger } from "../log.ts";
import { verifyHelloToken } from "./auth.ts";
import { KeyRegistry } from "./pinning.ts";
import type { Rules } from "./rules.ts";

/** Where, under `registeredClientsPath`, the keys of peer brokers are pinned. */
export const PEER_KEYS_FOLDER = "peers";

export class Authenticator {
  /** Pinned public keys of clients (`registeredClientsPath`). */
  #clients: KeyRegistry;
  /** Pinned public keys of peer brokers (`<registeredClientsPath>/peers`). */
  #peers: KeyRegistry;

  constructor(registeredClientsPath: string, readonly log: Logger) {
    this.#clients = new KeyRegistry(registeredClientsPath);
    this.#peers = new KeyRegistry(join(registeredClientsPath, PEER_KEYS_FOLDER));
  }

  get clients(): KeyRegistry {
    return this.#clients;
  }

  /** A reload: keys are read again from disk (an operator may have removed some), or from a new folder. */
  reload(registeredClientsPath: string): void {
    if (registeredClientsPath !== this.#clients.directory) {
      this.#clients = new KeyRegistry(registeredClientsPath);
      this.#peers = new KeyRegistry(join(registeredClientsPath, PEER_KEYS_FOLDER));
    } else {
      this.#clients.forget();
      this.#peers.forget();
    }
  }

  /**
   * Checks a proof at hello. A pinned id must prove the pinned key; a new id must be accepted by
   * the rules, prove the key it presents, and that key is then pinned (the loser of a race between
   * two first connections gets KEY_MISMATCH). A broker listed in `cluster.peers` is accepted by
   * that listing: rules are for clients.
   */
  async authenticate(config: Config, rules: Rules, clientId: string, nonce: string, proof: AuthProof, peer: boolean): Promise<void> {
    const { serviceId } = config;
    const registry = peer ? this.#peers : this.#clients;
    const pinned = await registry.get(clientId);
    if (pinned !== null) {
      await registry.pin(clientId, proof.publicKey); // KEY_MISMATCH names the problem better than a bad signature
      await verifyHelloToken({ token: proof.token, nonce, serviceId, publicKeyPem: pinned, clientId });
      return;
    }
    if (!peer && !rules.accepts(clientId)) {
      throw new KittenError("UNKNOWN_CLIENT", `Cannot accept client "${clientId}": no rule's client matches this new id`);
    }
    await verifyHelloToken({ token: proof.token, nonce, serviceId, publicKeyPem: proof.publicKey, clientId });
    if (await registry.pin(clientId, proof.publicKey) === "pinned") {
      this.log.info("auth", `${peer ? "peer" : "client"}=${clientId};public key pinned`);
    }
  }
}
