// Uses the package's types from CommonJS (`require`): checked by tsc (strict, nodenext) in the test.
import kittenMQ = require("kitten-mq");

const mq = kittenMQ.client();
mq.connect({ hosts: ["127.0.0.1:1234@broker-1"], clientId: "typed-cjs" }, (err: kittenMQ.KittenError | null) => {
  if (err) console.error(err.code);
});
mq.send("endpoint/v1/120", "coucou", (err) => console.log(err?.code));
const listener: kittenMQ.Subscription = mq.listen("endpoint/v1/*", (err, msg, info) => console.log(info?.channel.endpoint, msg));
listener.addId("10", (err) => console.log(err));
