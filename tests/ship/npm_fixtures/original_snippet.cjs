// The client part of the original kitten-mq README ("3) Use it in your code on client side"), run
// with `node` against the installed npm package. Kept as the README has it, except: the config
// values are the test's (broker address and key folder come from the environment), the comma the
// README misses after `clientId` is added, and the `report(...)` calls and the block at the end
// tell the test what happened.
const seen = new Set();
const report = (event, value) => {
  seen.add(event === 'consume' && value.nbRequeues > 0 ? 'consume again' : event);
  process.stdout.write(`event ${JSON.stringify({ event, value: value === undefined ? null : value })}\n`);
};

let kittenMQ = require('kitten-mq');

let config = {
  hosts : [
    process.env.KITTEN_HOST // list of brokers mirror URLs for High Avaibility
    // <url|ip>:<port>@<serviceId>#<private-token-of-broker>
  ],
  clientId : 'easilys-APP-KEY', // The client id, it must be globally unique
  keysDirectory : process.env.KEYS_DIRECTORY,
  keysName : 'key_name',
};

// When the client connects for the first time, it pushes the public key on the broker (subscription)
// Then, the broker will accept connections for this client only if tokens are generated with the same pub/priv key
let mq = kittenMQ.client();
mq.connect(config, (err) => {
  // This callback is called only once
  console.log(err);
  report('connect', err);
});

// Now, you are ready to send message to a specific channel
// If the broker is not available, it will re-try automatically until the sending queue is full, then the callback is called with errors
mq.send('endpoint/v1/120', 'coucou', (err) => {
  console.log(err);
  report('send 120', err);
});

// You can broadcast the message to all destination IDs of a channel
mq.send('endpoint/v1/*', 'coucou', (err) => {
  console.log(err);
  report('send *', err);
});

// You can listen channel, the message is sent to as many listeners as there are
mq.listen('endpoint/v1/120', (err, msg) => {
  console.log(msg);
  report('listen 120', msg);
});

// Or consume channel, the message is sent to one consumer at a time (round-robin distribution)
mq.consume('endpoint/v1/120', (err, msg, done, info) => {
  console.log(msg);
  report('consume', { msg, nbRequeues: info.nbRequeues });
  done(false); // requeue if false is passed
  done(false, 1); // requeue with a delay of 1 second
})

// You can use wildcard to listen many channels, and aknowledge
mq.listen('endpoint/v1/*', (err, msg, info) => {
  console.log(info.channel.endpoint);
  console.log(info.channel.version);
  console.log(info.channel.id);
  console.log(msg);
  report('listen *', { id: info.channel.id, msg });
});

// you can also pass an object to describe the channel
let _channel = {
  endpoint : 'endpoint',
  version : 'v1',
  ids : [123, 22, 33]
};

let listener = mq.listen(_channel, (msg) => {
  console.log(msg);
  report('listen object', msg);
});

listener.addId(10, (err) => { report('addId', err); }); // you can add id to listen at runtime
listener.removeId(222, (err) => { report('removeId', err); }); // or remove id to listen at runtime

// The test's end: once every callback has answered and the consumer has seen its message again
// after done(false).
const expected = ['connect', 'send 120', 'send *', 'addId', 'removeId', 'consume again'];
mq.on('error', (err) => report('error', err.code));
const timeout = setTimeout(() => {
  report('timeout', expected.filter((event) => !seen.has(event)));
  process.exit(1);
}, 15000);
const poll = setInterval(() => {
  if (!expected.every((event) => seen.has(event))) return;
  clearInterval(poll);
  clearTimeout(timeout);
  mq.disconnect(() => process.exit(0));
}, 20);
