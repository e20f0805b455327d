/**
 * The Kmap command lane: restart-safe administrator mutations of a Kmap,
 * applied exactly once, in submission order, to a signed transaction
 * history. SQLite is authoritative for command lifecycle state; the Kweb
 * manager applies commands; the embedded Kweb (./kweb) is the default.
 *
 * This is the core's public surface. Building blocks for tests, benchmarks
 * and fault injection are in ./internal.ts.
 */
export { CommandQueue } from "./command-queue.js";
export { retryWhileBusy } from "./command-reader.js";
export { type CommandEvent, type CommandEventKind, type CommandRecord, type CommandState } from "./command-record.js";
export { KwebTaskError } from "./command-runtime.js";
export { KmapError, PositionPrunedError, rootCauseFields, type KmapReason } from "./errors.js";
export { type KwebManager } from "./kweb-manager.js";
export { openKmapCore, type KmapCore } from "./kmap-core.js";
export { FIRST_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS } from "./retry-backoff.js";
export { validateSubmission, type Submission } from "./submission.js";
export { KwebReader, type KwebNode, type KwebTransaction } from "./kweb/index.js";
