/**
 * How the CLI reaches a running broker: its admin HTTP API, found from the same config file the
 * broker runs with (`--config FILE`; the embedded defaults without one). The state file written
 * by `start` gives the bound port (httpServerPort may be 0); the token comes from the config.
 */
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { queueProblem } from "../protocol/channel.ts";
import { isErrorCode, KittenError } from "../protocol/errors.ts";
import { type Config, defaultConfig, loadConfigFile, parseConfig } from "../server/mod.ts";
import { connectHost, readState } from "./state.ts";

import { CliError } from "./errors.ts";

export { CliError };

export interface Admin {
  readonly url: string;
  readonly config: Config;
  readonly configPath: string | null;
  /** Calls the API (with a JSON body when given); API errors become CliError with their code and details. */
  request<T = Record<string, unknown>>(method: string, path: string, body?: unknown): Promise<T>;
  /** Polls until nothing answers any more (the broker stopped) or `timeoutMs` passes. */
  waitGone(timeoutMs: number): Promise<boolean>;
}

const REQUEST_TIMEOUT_MS = 10_000;

export async function findAdmin(configPath: string | undefined): Promise<Admin> {
  // A mistyped path must not fall back to the defaults: they may well name another broker.
  if (configPath !== undefined && !existsSync(configPath)) {
    throw new CliError("CONFIG_INVALID", `Cannot use --config "${configPath}": file not found`);
  }
  const config = configPath ? await locatingConfig(configPath) : defaultConfig();
  const where = configPath ? `"${configPath}"` : "the embedded defaults (pass --config FILE)";
  if (!config.isManagementInterface) {
    throw new CliError(
      "UNREACHABLE",
      `the admin API is off in ${where} (isManagementInterface: false): turn it on, or signal the broker ` +
        `(kill -USR2 <pid> reloads, kill -USR1 <pid> soft-stops)`,
    );
  }
  const state = await readState(config);
  const { admin } = config;
  const url = state?.adminUrl ?? `${admin.tls ? "https" : "http"}://${connectHost(admin.host)}:${config.httpServerPort}`;
  const headers: Record<string, string> = admin.token === null ? {} : { Authorization: `Bearer ${admin.token}` };
  // The CLI reads the broker's own config on the broker's machine: its certificate may well be
  // self-signed, and the token, not the certificate, is what protects the API here.
  const tls = admin.tls ? { rejectUnauthorized: false } : undefined;

  const send = async (method: string, path: string, body?: unknown): Promise<Response> => {
    const init = body === undefined ? { headers } : { headers: { ...headers, "Content-Type": "application/json" }, body: JSON.stringify(body) };
    try {
      return await fetch(url + path, { method, ...init, tls, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    } catch (error) {
      const hint = state === null && config.httpServerPort === 0 ? " (httpServerPort is 0 and no state file names the bound port)" : "";
      throw new CliError("UNREACHABLE", `no broker answers on ${url}: is it running?${hint}`, { cause: String(error) });
    }
  };

  return {
    url,
    config,
    configPath: configPath ?? null,
    async request<T>(method: string, path: string, payload?: unknown): Promise<T> {
      const response = await send(method, path, payload);
      const body = await response.json().catch(() => null) as Record<string, unknown> | null;
      if (response.ok && body !== null) return body as T;
      const code = isErrorCode(body?.code) ? body.code : "INTERNAL";
      const message = typeof body?.message === "string" ? body.message : `HTTP ${response.status} ${response.statusText}`;
      throw new CliError(code, message, body?.details, true);
    },
    async waitGone(timeoutMs: number): Promise<boolean> {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        try {
          await fetch(`${url}/health`, { tls, signal: AbortSignal.timeout(1000) });
        } catch {
          return true;
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      return false;
    },
  };
}

/** Keys that say where the admin API is and how to authenticate to it. */
const LOCATING_KEYS = ["isManagementInterface", "httpServerPort", "dataDirectory", "admin"];

/**
 * The config file, or, when it is invalid, the keys that locate the admin API: the operator
 * may be about to run `kitten-mq reload` on that very file to have the broker list its
 * problems, and the running broker still answers where the state file says.
 */
async function locatingConfig(path: string): Promise<Config> {
  try {
    return await loadConfigFile(path);
  } catch (error) {
    if (!(error instanceof KittenError) || error.code !== "CONFIG_INVALID") throw error;
  }
  let config = defaultConfig();
  try {
    const raw = JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
    config = parseConfig(Object.fromEntries(LOCATING_KEYS.filter((key) => key in raw).map((key) => [key, raw[key]])));
  } catch {
    // Not JSON, or these keys are broken too: the defaults (and the state file) are all there is.
  }
  const base = dirname(resolve(path));
  config.dataDirectory = resolve(base, config.dataDirectory);
  const tls = config.admin.tls;
  if (tls) config.admin.tls = { cert: resolve(base, tls.cert), key: resolve(base, tls.key) };
  return config;
}

/** `orders/v1` → `/queues/orders/v1`; anything else is refused before a request is made. */
export function queuePath(queue: string): string {
  const problem = queueProblem(queue);
  if (problem !== null) {
    throw new CliError("USAGE", `Cannot use -q ${JSON.stringify(queue)}: ${problem}`);
  }
  return `/queues/${queue.split("/").map(encodeURIComponent).join("/")}`;
}
