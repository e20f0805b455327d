/**
 * The Kmap command lane: restart-safe administrator mutations of a Kmap,
 * applied exactly once, in submission order, to a signed transaction
 * history. SQLite is authoritative for command lifecycle state; the Kweb
 * manager applies commands; the embedded Kweb (./kweb) is the default.
 *
 * This is the core's public surface. Building blocks for tests, benchmarks
 * and fault injection are in ./internal.ts.
 */
export { canonicalCommand, parseCanonicalCommand } from "./canonical-command.js";
export { systemClock, type Clock } from "./clock.js";
export { CommandQueue, WATCH_PAGE, type LaneStatus, type SubmitResult } from "./command-queue.js";
export { retryWhileBusy } from "./command-reader.js";
export { type CommandEvent, type CommandEventKind, type CommandFailure, type CommandRecord, type CommandState } from "./command-record.js";
export { CommandRuntime, DEFAULT_EVENT_RETENTION, KwebTaskError, type LaneRuntime, type RuntimeOptions } from "./command-runtime.js";
export { BacklogFullError, KmapBusyError, KmapError, PositionPrunedError, rootCauseFields, type KmapReason } from "./errors.js";
export { WriterUnavailableError, type ApplyOutcome, type ApplyRequest, type KwebManager, type RejectionCode } from "./kweb-manager.js";
export { openKmapCore, type KmapCore, type KmapCoreOptions } from "./kmap-core.js";
export { DEFAULT_MAX_PENDING } from "./open-command-queue.js";
export { FIRST_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS, retryDelayMs } from "./retry-backoff.js";
export { checkIdempotencyId, checkNodeId, MAX_COMMAND_BYTES, MAX_EXPECTATIONS, parseSubmission, validateSubmission, type Submission } from "./submission.js";
export {
  isCanonicalKwebId,
  KwebReader,
  transactionPayload,
  verifyHistoryChain,
  verifyTransaction,
  TRANSACTION_PAYLOAD_SCHEMA,
  type KwebLink,
  type KwebNode,
  type KwebTransaction,
  type Verification,
} from "./kweb/index.js";
