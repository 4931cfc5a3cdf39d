/**
 * @module
 * The client library. Runtime-neutral: it imports only `../protocol` and `node:*` modules that
 * Bun, Deno and Node all provide; never the `Bun` global or the server.
 */
export { Client, client } from "./client.ts";
export type { ClientOptions, Host } from "./options.ts";
export { parseHost } from "./options.ts";
export type {
  ChannelInput,
  ConsumeHandler,
  DeliveryInfo,
  Done,
  ListenHandler,
  SubscribeOptions,
  Subscription,
} from "./subscription.ts";
export type { HostStatus } from "./masters.ts";
