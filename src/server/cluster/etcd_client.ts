/**
 * The etcd client every cluster module uses (election, queue map): one place for the call
 * deadline, the fault handling and the reconnect backoff, which all decide how fast a broker sees
 * etcd again after a node failed.
 */
import { noop } from "cockatiel";
import { Etcd3 } from "etcd3";

const WATCH_RETRY_MS = 1000;

/**
 * A watch backoff for etcd3 (cockatiel's `IBackoff` shape): etcd3's default grows to 30 s, which
 * would leave a broker blind to a change long after etcd is back.
 */
function watchBackoff(durationMs: number): { duration: number; next(): ReturnType<typeof watchBackoff> } {
  return { duration: durationMs, next: () => watchBackoff(Math.min(WATCH_RETRY_MS, Math.max(50, durationMs * 2))) };
}

/** An etcd client whose unary calls give up after `callTimeoutMs` (streams are not bounded). */
export function connectEtcd(endpoints: string[], callTimeoutMs: number): Etcd3 {
  return new Etcd3({
    hosts: endpoints,
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + callTimeoutMs }),
    // No circuit breaker per node: etcd3's default shuts a node out for 5 s after three failures,
    // and when another node then hangs, every call (renewals included) goes to the hung one.
    faultHandling: { host: () => noop, watchBackoff: watchBackoff(50) },
    // gRPC waits up to 2 minutes before reconnecting to a node that failed; a node that is back
    // must serve renewals again within a lease TTL.
    grpcOptions: { "grpc.initial_reconnect_backoff_ms": 100, "grpc.max_reconnect_backoff_ms": 1000 },
  });
}

/**
 * One client per etcd node, for the lease keeper's single renewals: each renewal goes to the node
 * it names, so a node that hangs delays only the renewals sent through it. Clients are made on
 * first use (a master whose keep-alive stream never falters needs none).
 */
export class EndpointRenewals {
  readonly #endpoints: string[];
  readonly #clients: (Etcd3 | null)[];

  constructor(endpoints: string[]) {
    this.#endpoints = endpoints;
    this.#clients = endpoints.map(() => null);
  }

  get count(): number {
    return this.#endpoints.length;
  }

  /** Renews lease `id` once through node `index`; resolves with the TTL etcd answers (0: expired). */
  async renew(index: number, id: string, deadlineMs: number): Promise<number> {
    const client = (this.#clients[index] ??= connectEtcd([this.#endpoints[index]!], deadlineMs));
    const stream = await client.leaseClient.leaseKeepAlive({ deadline: Date.now() + deadlineMs });
    try {
      const answer = await new Promise<{ TTL: string }>((resolve, reject) => {
        stream.on("data", resolve);
        stream.on("error", reject);
        // A stream closed without an answer must fail this try, or the keeper would wait on it forever.
        stream.on("end", () => reject(new Error(`etcd ${this.#endpoints[index]} closed the renewal without an answer`)));
        stream.write({ ID: id });
      });
      return Number(answer.TTL);
    } finally {
      stream.end();
    }
  }

  close(): void {
    for (const client of this.#clients) client?.close();
    this.#clients.fill(null);
  }
}
