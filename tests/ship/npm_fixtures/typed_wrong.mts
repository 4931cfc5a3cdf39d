// Misuses the package's types: tsc must refuse this file (proof that the types are checked).
import { client } from "kitten-mq";

const mq = client();
await mq.send(42, "a channel must be a string or an object");
