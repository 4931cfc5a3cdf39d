/**
 * A link from this broker to another broker of the deployment, as a peer: it says hello with
 * `peer: true` and proves its serviceId with its own key pair (`keysDirectory`/`keysName`), as a
 * slave does towards its master (cluster/upstream.ts). A queue move's source uses it to reach the
 * target group's master. Frames after the welcome go to `frame`; the link ends once, with why.
 */
import { connect, type Socket } from "node:net";
import {
  type Challenge,
  decode,
  encode,
  frame,
  FrameDecoder,
  type Host,
  isErrorCode,
  KittenError,
  OP,
  opOf,
  peerMaxFrameSize,
  type WelcomeInfo,
} from "../../protocol/mod.ts";
import { answerChallenge, loadOrCreateKeys } from "../../protocol/keys.ts";
import { PROTOCOL_VERSION } from "../../version.ts";

export interface PeerLinkOptions {
  serviceId: string;
  keysDirectory: string;
  keysName: string;
  maxFrameSize: number;
  /** The broker answered the handshake; a link to a broker that is not master is ended by the caller. */
  welcomed(welcome: WelcomeInfo): void;
  frame(value: unknown[]): void;
  /** The link ended (null: closed by `close()`). Called once. */
  ended(error: KittenError | null): void;
}

const HANDSHAKE_MS = 5_000;

export class PeerLink {
  readonly #socket: Socket;
  #open = false;
  #ended = false;

  constructor(readonly host: Host, readonly options: PeerLinkOptions) {
    const socket = connect({ host: host.host, port: host.port });
    socket.setNoDelay(true);
    this.#socket = socket;
    const decoder = new FrameDecoder(peerMaxFrameSize(options.maxFrameSize));
    const handshake = setTimeout(() => this.#end(new KittenError("CONNECTION_LOST", `Cannot reach "${host.label}": no welcome within ${HANDSHAKE_MS} ms`)), HANDSHAKE_MS);
    socket.on("connect", () => this.write([OP.HELLO, PROTOCOL_VERSION, { client: options.serviceId, token: host.token, peer: true }]));
    socket.on("error", (error) => this.#end(new KittenError("CONNECTION_LOST", `Cannot reach "${host.label}": ${error.message}`)));
    socket.on("close", () => {
      clearTimeout(handshake);
      this.#end(new KittenError("CONNECTION_LOST", `Cannot go on with "${host.label}": the link closed`));
    });
    socket.on("data", (chunk: Uint8Array) => {
      try {
        decoder.each(chunk, (data, start, end) => {
          if (this.#ended) return false;
          const value = decode(data.subarray(start, end)) as unknown[];
          const op = opOf(value);
          if (this.#open) {
            options.frame(value);
          } else if (op === OP.CHALLENGE) {
            this.#prove(value[1] as Challenge).then((auth) => this.write(auth), (error) => this.#end(new KittenError("KEY_FILE_ERROR", String(error.message))));
          } else if (op === OP.WELCOME) {
            clearTimeout(handshake);
            this.#open = true;
            options.welcomed(value[1] as WelcomeInfo);
          } else if (op === OP.ERROR) {
            const code = isErrorCode(value[2]) ? value[2] : "INTERNAL";
            this.#end(new KittenError(code, `"${host.label}" refused this broker: ${String(value[3])}`));
            return false;
          }
          return true;
        });
      } catch (error) {
        this.#end(new KittenError("BAD_FRAME", `Cannot read what "${host.label}" sent: ${(error as Error).message}`));
      }
    });
  }

  get isOpen(): boolean {
    return this.#open && !this.#ended;
  }

  /** Bytes written and not yet taken by the socket. */
  get pendingBytes(): number {
    return this.#socket.writableLength;
  }

  write(op: unknown[]): void {
    if (!this.#ended && !this.#socket.destroyed) this.#socket.write(frame(encode(op)));
  }

  /** Writes frames already encoded (length prefix included), in one socket write. */
  writeFramed(bytes: Uint8Array): void {
    if (!this.#ended && !this.#socket.destroyed) this.#socket.write(bytes);
  }

  close(): void {
    this.#end(null);
  }

  #end(error: KittenError | null): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#socket.destroy();
    this.options.ended(error);
  }

  #prove(challenge: Challenge): Promise<unknown[]> {
    return answerChallenge(loadOrCreateKeys(this.options.keysDirectory, this.options.keysName), this.options.serviceId, this.host, challenge);
  }

}
