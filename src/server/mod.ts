/**
 * @module
 * The broker. Only this folder may use `Bun.*`; it never imports the client, admin or CLI.
 */
export { startBroker, type BrokerServer } from "./server.ts";
export { Broker, type BrokerOptions } from "./broker.ts";
export { RESTART_KEY_PATHS } from "./config/restart_keys.ts";
export { defaultConfig, isLoopbackHost, loadConfigFile, parseConfig, securityWarnings, type Config, type ConfigProblem } from "./config/config.ts";
export type { Queue } from "./queue/queue.ts";
export { type CopyInfo, depthById, handlerCounts, type HandlerInfo, handlersInfo, message, messages } from "./queue/view.ts";
export type { Session } from "./session.ts";
export type { Peer } from "./peer.ts";
export { Logger, memoryLogger } from "./log.ts";
export type { ClusterStatus } from "./cluster/cluster.ts";
export type { MoveRecord } from "./cluster/move_records.ts";
export { HISTORY_MAX_QUEUES, HISTORY_POINTS, type HistoryView } from "./stats/history.ts";
export { type Gauge, type GaugeSample, LATENCY_SAMPLE_EVERY } from "./stats/stats.ts";
export { DEFAULT_MAX_MOVES, planRebalance, type PlannedMove } from "./move/rebalance.ts";
