/**
 * A raw protocol peer for end-to-end tests: frames in and out over a real TCP socket, no client
 * library, so tests pin the wire protocol itself (PROTOCOL.md).
 */
import { connect, type Socket } from "node:net";
import { decode, encode, frame, FrameDecoder, OP } from "../../src/protocol/mod.ts";
import { PROTOCOL_VERSION } from "../../src/version.ts";
import { loadOrCreateKeys, signHelloToken } from "../../src/client/keys.ts";
import { testKeysDirectory } from "./keys.ts";
import { sleep } from "./broker.ts";

export interface Wire {
  /** Encodes one operation array and writes it as one frame. */
  send(op: unknown[]): void;
  /** Writes bytes as they are (garbage, partial frames, several frames at once). */
  sendRaw(bytes: Uint8Array): void;
  /**
   * The next frame (decoded) whose operation is `opCode`; frames of other operations that arrive
   * first are kept for later `expect` calls. Rejects after `timeoutMs`.
   */
  expect(opCode: number, timeoutMs?: number): Promise<unknown[]>;
  /** Like `expect`, for the next frame whose operation is any of `opCodes`. */
  expectAny(opCodes: number[], timeoutMs?: number): Promise<unknown[]>;
  /** Every frame received so far and not yet taken by `expect`. */
  readonly buffered: unknown[][];
  /** Resolves when the broker (or we) closed the connection. */
  readonly closed: Promise<void>;
  readonly isClosed: boolean;
  /** Stops reading from the socket (a slow or stuck peer); the kernel buffers fill up. */
  pause(): void;
  resume(): void;
  close(): void;
}

interface Waiter {
  opCodes: number[];
  resolve(value: unknown[]): void;
  reject(error: Error): void;
  timer: ReturnType<typeof setTimeout>;
}

/** Connect errors the host's TCP stack may give for a moment (no local port free for that pair): tried again. */
const TRANSIENT_CONNECT = new Set(["EADDRINUSE", "EADDRNOTAVAIL"]);

/**
 * How often a connect that meets a transient error is tried: a loaded CI host gave EADDRINUSE to
 * three tries in a row, 20 and 40 ms apart; these ten span about 2.3 s.
 */
const CONNECT_ATTEMPTS = 10;

/** A TCP connection to the broker, tried again on a transient connect error. */
async function connected(host: string, port: number): Promise<Socket> {
  for (let attempt = 1; ; attempt++) {
    const socket: Socket = connect({ host, port });
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once("connect", () => resolve());
        socket.once("error", reject);
      });
      return socket;
    } catch (error) {
      socket.destroy();
      if (attempt === CONNECT_ATTEMPTS || !TRANSIENT_CONNECT.has((error as { code?: string }).code ?? "")) throw error;
      await sleep(50 * attempt);
    }
  }
}

export async function dial(port: number, host = "127.0.0.1"): Promise<Wire> {
  const socket = await connected(host, port);
  socket.setNoDelay(true);
  const decoder = new FrameDecoder(64 * 1024 * 1024);
  const buffered: unknown[][] = [];
  const waiters: Waiter[] = [];
  let isClosed = false;
  let resolveClosed!: () => void;
  const closed = new Promise<void>((resolve) => (resolveClosed = resolve));

  const offer = (value: unknown[]) => {
    const at = waiters.findIndex((w) => w.opCodes.includes(value[0] as number));
    if (at < 0) return buffered.push(value);
    const [waiter] = waiters.splice(at, 1);
    clearTimeout(waiter!.timer);
    waiter!.resolve(value);
  };

  socket.on("data", (chunk: Uint8Array) => {
    for (const body of decoder.push(chunk)) offer(decode(body) as unknown[]);
  });
  socket.on("error", () => {});
  socket.on("close", () => {
    isClosed = true;
    resolveClosed();
  });

  function expectAny(opCodes: number[], timeoutMs = 1000): Promise<unknown[]> {
    const at = buffered.findIndex((value) => opCodes.includes(value[0] as number));
    if (at >= 0) return Promise.resolve(buffered.splice(at, 1)[0]!);
    return new Promise<unknown[]>((resolve, reject) => {
      const waiter: Waiter = {
        opCodes,
        resolve,
        reject,
        timer: setTimeout(() => {
          waiters.splice(waiters.indexOf(waiter), 1);
          const got = JSON.stringify(buffered.map((v) => v[0]));
          reject(new Error(
            `expected op ${opCodes.join(" or ")} within ${timeoutMs} ms; got ${got}` +
              (isClosed ? " (connection closed)" : ""),
          ));
        }, timeoutMs),
      };
      waiters.push(waiter);
    });
  }

  return {
    send(op) {
      socket.write(frame(encode(op)));
    },
    sendRaw(bytes) {
      socket.write(bytes);
    },
    expect: (opCode, timeoutMs = 1000) => expectAny([opCode], timeoutMs),
    expectAny,
    buffered,
    closed,
    get isClosed() {
      return isClosed;
    },
    pause() {
      socket.pause();
    },
    resume() {
      socket.resume();
    },
    close() {
      socket.destroy();
    },
  };
}

/** Says hello as `client` and returns the welcome info. */
export async function hello(wire: Wire, client: string, token: string | null = null): Promise<Record<string, unknown>> {
  wire.send([OP.HELLO, PROTOCOL_VERSION, { client, token }]);
  return await answerChallenge(wire, client);
}

/** Waits for the broker's challenge, answers it with a token signed by the test key, returns welcome. */
export async function answerChallenge(wire: Wire, client: string): Promise<Record<string, unknown>> {
  const [, challenge] = await wire.expect(OP.CHALLENGE) as [number, { nonce: string; serviceId: string }];
  wire.send([OP.AUTH, await proofFor(client, challenge)]);
  const welcome = await wire.expect(OP.WELCOME);
  return welcome[1] as Record<string, unknown>;
}

/** The AUTH payload for `client` answering `challenge`, signed with the shared test key pair. */
export async function proofFor(
  client: string,
  challenge: { nonce: string; serviceId: string },
  keysName = "wire",
): Promise<{ token: string; publicKey: string }> {
  const keys = await loadOrCreateKeys(testKeysDirectory, keysName);
  const token = await signHelloToken({
    privateKey: keys.privateKey,
    clientId: client,
    audience: challenge.serviceId,
    nonce: challenge.nonce,
  });
  return { token, publicKey: keys.publicKeyPem };
}

/** A 4-byte big-endian length prefix followed by `body` (any bytes). */
export function rawFrame(body: Uint8Array, length = body.length): Uint8Array {
  const out = new Uint8Array(4 + body.length);
  new DataView(out.buffer).setUint32(0, length);
  out.set(body, 4);
  return out;
}
