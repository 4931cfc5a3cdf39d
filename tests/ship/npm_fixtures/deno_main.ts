// A Deno program in a project outside the repository, importing the client the way the README
// says: `npm install kitten-mq`, then a bare import.
import { client, type DeliveryInfo } from "kitten-mq";

const mq = client();
await mq.connect({ hosts: [Deno.args[0]!], clientId: "deno-outside", keysDirectory: "keys" });
const got: { message: unknown; info: DeliveryInfo }[] = [];
await mq.consume("deno/v1/*", (err, message, done, info) => {
  if (err) throw err;
  got.push({ message, info: info! });
  done();
}).ready;
await mq.send("deno/v1/1", { from: "deno" });
while (got.length < 1) await new Promise((resolve) => setTimeout(resolve, 10));
await mq.disconnect();
console.log(JSON.stringify({ message: got[0]!.message, id: got[0]!.info.channel.id }));
