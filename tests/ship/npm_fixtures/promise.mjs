// The promise API through the package's ES module entry, as the README's Node quick start uses it.
import { client, KittenError } from "kitten-mq";

const mq = client();
await mq.connect({ hosts: [process.env.KITTEN_HOST], clientId: "npm-esm", keysDirectory: process.env.KEYS_DIRECTORY });
const received = [];
await mq.consume("esm/v1/*", (err, msg, done, info) => {
  if (err) throw err;
  received.push({ id: info.channel.id, msg });
  done();
}).ready;
await mq.send("esm/v1/7", { total: 12.5 });
const refused = await mq.send("*/v1/7", 1).catch((error) => error);
while (received.length < 1) await new Promise((resolve) => setTimeout(resolve, 10));
await mq.disconnect();
console.log(JSON.stringify({ received, refused: refused instanceof KittenError ? refused.code : String(refused) }));
