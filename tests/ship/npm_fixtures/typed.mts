// Uses the package's types from an ES module: checked by tsc (strict, nodenext) in the test.
import kittenMQ, { client, Client, KittenError, VERSION, type ClientOptions, type DeliveryInfo, type ErrorCode, type Subscription } from "kitten-mq";

const options: Partial<ClientOptions> = { hosts: ["127.0.0.1:1234@broker-1"], clientId: "typed", keysDirectory: "keys" };
const mq: Client = client();
await mq.connect(options);
const subscription: Subscription = mq.consume("orders/v1/*", (err: KittenError | null, message: unknown, done, info?: DeliveryInfo) => {
  if (err) {
    const code: ErrorCode = err.code;
    console.error(code, err.message);
    return;
  }
  console.log(info?.channel.id, info?.nbRequeues, message);
  done(false, 0.5);
});
await subscription.ready;
await subscription.addId("42");
const sent: Promise<void> = mq.send("orders/v1/42", { total: 12.5 });
await sent;
mq.listen({ endpoint: "orders", version: "v1", ids: ["1", "2"] }, (err, message, info) => console.log(err?.code, message, info?.messageId));
mq.on("error", (error: KittenError) => console.error(error.code));
const version: string = VERSION;
const other: Client = kittenMQ.client(); // the default export is the whole module, as with require
console.log(other.isConnected());
console.log(version, mq.isConnected());
await mq.disconnect();
