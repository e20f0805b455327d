import { CoreError } from "../errors/core-error.js";

/**
 * The Kmap core's reasons. The specification's public error enum is
 * `InvalidInput`, `Conflict` or `Internal`; Laneway adds:
 *
 * - `not_found`: a read of a record or node that does not exist;
 * - `backlog_full`: a new submission while `--kmap-max-pending` commands are
 *   unfinished (nothing already accepted is touched; retry later);
 * - `position_pruned`: a watch from a change-log position whose changes have
 *   been pruned (the error says from which position the log is complete);
 * - `unavailable`: another connection or process holds a lock on one of the
 *   Kmap's SQLite files for longer than the call may wait.
 */
export type KmapReason = "invalid_input" | "conflict" | "not_found" | "backlog_full" | "position_pruned" | "unavailable" | "internal";

/**
 * A failure of the Kmap command lane. Messages name the field or identifier
 * involved; SQLite's own error text stays in `cause` (see CoreError).
 */
export class KmapError extends CoreError<KmapReason> {
  override readonly name: string = "KmapError";
  readonly domain = "kmap" as const;
}

/**
 * SubmitCommand was refused because the backlog of unfinished commands is at
 * its limit. Nothing was stored; the caller may retry once commands finish.
 */
export class BacklogFullError extends KmapError {
  override readonly name: string = "BacklogFullError";

  constructor(readonly maxPending: number) {
    super(
      "backlog_full",
      `the Kmap command backlog is full: ${maxPending} commands are waiting to be applied; retry once some have finished (ListCommands reports the backlog)`,
    );
  }
}

/**
 * A watch asked for changes that the change log no longer holds. Every
 * change after `resumeAfterPosition` is still there: read the current
 * records with ListCommands, then watch after that position.
 */
export class PositionPrunedError extends KmapError {
  override readonly name: string = "PositionPrunedError";

  constructor(
    /** The position the watch asked to start after. */
    readonly requestedPosition: number,
    /** The oldest change the log still holds. */
    readonly oldestPosition: number,
  ) {
    super(
      "position_pruned",
      `the change log no longer holds the changes after position ${requestedPosition}: it keeps them from position ${oldestPosition} on; read the current records with ListCommands and watch after position ${oldestPosition - 1}`,
    );
  }

  /** Watch after this position to receive every change the log still holds. */
  get resumeAfterPosition(): number {
    return this.oldestPosition - 1;
  }
}

/**
 * Another connection holds a lock on a Kmap SQLite file, so a read could not
 * run without waiting (reads never wait on the server's event loop), or a
 * submission could not be stored within the lane's busy timeout. Nothing was
 * changed; retry.
 */
export class KmapBusyError extends KmapError {
  override readonly name: string = "KmapBusyError";

  constructor(what: "the command lane database" | "the Kweb file", options?: { cause?: unknown }) {
    super("unavailable", `${what} is locked by another connection; retry shortly`, options);
  }
}

/**
 * The deepest cause of a failure that carries a code: the SQLite result code
 * (`SQLITE_FULL`, `SQLITE_IOERR_WRITE`, …), a system error code (`ENOSPC`) or
 * the way a worker thread ended — what an operator needs to act on, where
 * the first cause is often only Laneway's own wrapper. Only the class name and
 * the code are returned: never a message, which may hold a path.
 */
export function rootCauseFields(error: unknown): { rootCause?: string; rootCode?: string } {
  let found: { rootCause?: string; rootCode?: string } = {};
  const seen = new Set<unknown>();
  let current: unknown = error;
  while (current instanceof Error && !seen.has(current)) {
    seen.add(current);
    const code = (current as { code?: unknown }).code;
    if ((typeof code === "string" || typeof code === "number") && !(current instanceof CoreError)) {
      found = { rootCause: current.constructor.name === "Error" ? current.name : current.constructor.name, rootCode: String(code) };
    }
    current = current.cause;
  }
  return found;
}
