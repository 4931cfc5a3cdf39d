/** The client's key pair and hello token: the same files and tokens a broker uses towards its peers. */
export { answerChallenge, type ClientKeys, type HelloTokenInput, loadOrCreateKeys, signHelloToken } from "../protocol/keys.ts";
