/**
 * @module
 * The admin HTTP API and dashboard of a running broker: statistics (Prometheus), reload,
 * soft-stop, queue and client inspection, purge, key un-pinning, queue moves. Imports the
 * server's public surface (`server/mod.ts`) and the protocol; never the client or the CLI.
 */
export { type AdminOptions, createAdminApp } from "./app.ts";
export { type AdminServer, startAdmin } from "./serve.ts";
export { SOFT_STOP_GRACE_MS, STOP_GRACE_MS, type StopHandler } from "./control.ts";
export { METRICS_CONTENT_TYPE, renderMetrics } from "./metrics.ts";
export { renderStatistics } from "./statistics.ts";
