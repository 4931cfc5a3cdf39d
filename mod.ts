/**
 * @module
 * Kitten-MQ client, one code base for Node.js, Bun and Deno. Bun and Deno can import this file
 * and its TypeScript sources directly; the npm package `kitten-mq` is built from it (CommonJS,
 * ES module and declarations, by scripts/package.ts).
 *
 * @example
 * ```ts
 * import { client } from "kitten-mq"; // or "./mod.ts" in this repository
 *
 * const mq = client();
 * await mq.connect({ hosts: ["127.0.0.1:1234@broker-1"], clientId: "quickstart" });
 * mq.consume("orders/v1/*", (err, msg, done, info) => {
 *   if (err) return console.error(err.code, err.message);
 *   console.log(info?.channel.id, msg);
 *   done();
 * });
 * await mq.send("orders/v1/42", { total: 12.5 });
 * ```
 */
export { Client, client } from "./src/client/mod.ts";
export type {
  ChannelInput,
  ClientOptions,
  ConsumeHandler,
  DeliveryInfo,
  Done,
  Host,
  HostStatus,
  ListenHandler,
  SubscribeOptions,
  Subscription,
} from "./src/client/mod.ts";
export { ERRORS, KittenError, type ErrorCode } from "./src/protocol/errors.ts";
export { PROTOCOL_VERSION, VERSION } from "./src/version.ts";
