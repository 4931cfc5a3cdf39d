/**
 * Host strings, `host:port@serviceId#token`: how a client names its brokers, and how a broker
 * names its peers (`cluster.peers`).
 */
export interface Host {
  host: string;
  port: number;
  serviceId: string | null;
  token: string | null;
  /** The host string as given, for messages. */
  label: string;
}

/** Parses `host:port@serviceId#token`; `[::1]:1234` for IPv6. */
export function parseHost(label: string): Host {
  if (typeof label !== "string") throw new TypeError(`Cannot connect: host must be a string: current value is ${label}`);
  const at = label.indexOf("@");
  const address = at < 0 ? label : label.slice(0, at);
  const rest = at < 0 ? "" : label.slice(at + 1);
  const hash = rest.indexOf("#");
  const serviceId = (hash < 0 ? rest : rest.slice(0, hash)) || null;
  const token = hash < 0 ? null : rest.slice(hash + 1) || null;
  const match = /^(?:\[([^\]]+)\]|([^:\[\]]+)):(\d{1,5})$/.exec(address);
  const port = match ? Number(match[3]) : NaN;
  if (!match || port < 1 || port > 65535) {
    throw new RangeError(`Cannot connect: host "${label}" must look like "host:port@serviceId#token" with port 1..65535`);
  }
  return { host: match[1] ?? match[2]!, port, serviceId, token, label };
}
