/**
 * A publisher in its own process, killed with SIGKILL together with the master by
 * `scripts/failover.ts --kill-publisher`. It sends `{n}` for n = from, from + 1, … at `rate`
 * messages per second (`window` unconfirmed at most) and appends each n to `file` the moment its
 * confirmation arrives, with a synchronous write: what the file holds was confirmed before the
 * kill, and must be delivered afterwards.
 *
 *   bun scripts/failover/publisher.ts '{"hosts": [...], "clientId": "...", "keysDirectory": "...",
 *                                      "channel": "failover/v1", "from": 0, "rate": 2000, "window": 200, "file": "..."}'
 */
import { closeSync, openSync, writeSync } from "node:fs";
import { Client } from "../../mod.ts";

interface Options {
  hosts: string[];
  clientId: string;
  keysDirectory: string;
  channel: string;
  from: number;
  rate: number;
  window: number;
  file: string;
}

const options = JSON.parse(process.argv[2] ?? "{}") as Options;
const fd = openSync(options.file, "a");
const mq = new Client();
mq.on("error", () => {}); // the master is killed on purpose: its link errors are expected
await mq.connect({
  hosts: options.hosts,
  clientId: options.clientId,
  keysDirectory: options.keysDirectory,
  reconnectDelayMs: 10,
  maxReconnectDelayMs: 50,
  maxPendingMessages: options.window * 2,
});
console.log("ready");

let n = options.from;
let pending = 0;
// A token bucket: sends paused by a failover do not come back as a burst.
let tokens = 0;
let last = performance.now();
for (;;) {
  const now = performance.now();
  tokens = Math.min(options.window, tokens + ((now - last) / 1000) * options.rate);
  last = now;
  while (pending < options.window && tokens >= 1) {
    tokens--;
    const sent = n++;
    pending++;
    mq.send(`${options.channel}/${sent % 4}`, { n: sent }).then(
      () => writeSync(fd, `${sent}\n`),
      () => {}, // refused (NOT_ENOUGH_REPLICAS while replicas catch up): not confirmed, not counted
    ).finally(() => pending--);
  }
  await Bun.sleep(2);
}
// Never reached: the process ends by SIGKILL or SIGTERM.
closeSync(fd);
