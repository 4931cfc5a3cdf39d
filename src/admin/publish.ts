/**
 * POST /publish: an operator sends a test message from the dashboard or `kitten-mq publish`.
 *
 *   POST /publish   {"channel": "orders/v1/42", "body": <any JSON value>, "messageId"?: "…"}
 *                   → 201 {"messageId", "channel", "queue"} once the broker accepted it (on disk when durable)
 *
 * It goes through the same door as a client's send: the channel's format (`channels[q].map`)
 * checks the body, and with `rules` configured the admin is the client `ADMIN_CLIENT_ID`, which
 * may write only where a rule grants it (`{ "client": "kitten-mq-admin", "write": ["orders/*"] }`).
 */
import { randomUUID } from "node:crypto";
import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import * as v from "valibot";
import { encode } from "../protocol/cbor.ts";
import { KittenError } from "../protocol/errors.ts";
import type { BrokerServer } from "../server/mod.ts";

/** The client id the admin API publishes as, for the rules. */
export const ADMIN_CLIENT_ID = "kitten-mq-admin";

const PublishRequest = v.strictObject({
  channel: v.pipe(v.string(), v.minLength(1)),
  body: v.optional(v.unknown()),
  messageId: v.optional(v.pipe(v.string(), v.regex(/^[\x21-\x7e]{1,128}$/, "must be 1 to 128 printable ASCII characters"))),
});

export function publishRoutes(server: BrokerServer): Hono {
  const app = new Hono();
  const { broker } = server;
  app.post(
    "/publish",
    // Checked before the body is read: a request never makes the broker hold more than a frame.
    (c, next) =>
      bodyLimit({
        maxSize: broker.config.socketServer.maxFrameSize,
        onError: () => {
          throw new KittenError("BAD_REQUEST", `Cannot publish: the request is larger than maxFrameSize (${broker.config.socketServer.maxFrameSize} bytes)`);
        },
      })(c, next),
    async (c) => {
      let input: unknown;
      try {
        input = await c.req.json();
      } catch (error) {
        throw new KittenError("BAD_REQUEST", `Cannot publish: the request body is not JSON: ${(error as Error).message}`);
      }
      const parsed = v.safeParse(PublishRequest, input);
      if (!parsed.success) {
        const issue = parsed.issues[0];
        const path = issue.path?.map((p) => String(p.key)).join(".") || "(request)";
        throw new KittenError("BAD_REQUEST", `Cannot publish: ${path}: ${issue.message}; send {"channel": "endpoint/version/id", "body": …}`);
      }
      const { channel, body } = parsed.output;
      if (body === undefined) throw new KittenError("BAD_REQUEST", `Cannot publish to "${channel}": body is missing`);
      const messageId = parsed.output.messageId ?? `admin-${randomUUID()}`;
      const sender = { clientId: ADMIN_CLIENT_ID, grants: broker.rules.forClient(ADMIN_CLIENT_ID) };
      await broker.send(channel, messageId, encode(body), sender);
      broker.flush(); // deliveries now, not at the next timer tick
      const queue = channel.split("/").slice(0, 2).join("/");
      broker.log.info("admin", `channel=${channel};messageId=${messageId};published by an operator`);
      return c.json({ messageId, channel, queue }, 201);
    },
  );
  return app;
}
