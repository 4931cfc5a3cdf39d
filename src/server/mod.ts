/**
 * @module
 * The broker. Only this folder may use `Bun.*`; it never imports the client, admin or CLI.
 */
export { startBroker, type BrokerServer } from "./server.ts";
export { Broker, type BrokerOptions } from "./broker.ts";
export { defaultConfig, loadConfigFile, parseConfig, type Config } from "./config.ts";
export { Logger, memoryLogger } from "./log.ts";
