/**
 * The Kmap command lane: restart-safe administrator mutations of a Kmap,
 * applied exactly once, in submission order, to a signed transaction
 * history. SQLite is authoritative for command lifecycle state; the Kweb
 * manager applies commands; the embedded Kweb (./kweb) is the default.
 */
export { canonicalCommand, parseCanonicalCommand } from "./canonical-command.js";
export { systemClock, type Clock } from "./clock.js";
export { CommandLane, type SubmitResult } from "./command-lane.js";
export { type CommandEvent, type CommandEventKind, type CommandFailure, type CommandRecord, type CommandState } from "./command-record.js";
export { CommandRuntime, KwebTaskError, type RuntimeOptions } from "./command-runtime.js";
export { KmapError, type KmapErrorCode } from "./errors.js";
export { WriterUnavailableError, type ApplyOutcome, type ApplyRequest, type KwebManager, type RejectionCode } from "./kweb-manager.js";
export { LaneStorageError } from "./lane-store.js";
export { openCommandLane, type OpenedCommandLane } from "./open-command-lane.js";
export { openKmapCore, type KmapCore, type KmapCoreOptions } from "./kmap-core.js";
export { noPausePoints, pausePointsFromSetting, type PausePoint, type PausePoints } from "./pause-points.js";
export { FIRST_RETRY_DELAY_MS, MAX_RETRY_DELAY_MS, retryDelayMs } from "./retry-backoff.js";
export { checkIdempotencyId, checkNodeId, MAX_COMMAND_BYTES, MAX_EXPECTATIONS, parseSubmission, validateSubmission, type Submission } from "./submission.js";
