import { safeMessage } from "../log/safe-message.js";

/**
 * Typed failures of the lanes core. The codes are the specification's JSON
 * code values, which existing peers switch on; the server maps each to a
 * Connect code in one place (src/server/error-mapping.ts).
 */
export type LaneErrorCode =
  | "lane_invalid"
  | "lane_forbidden"
  | "lane_conflict"
  | "lane_cursor"
  | "lane_stale"
  | "lane_capacity"
  | "lane_canceled"
  | "lane_unavailable"
  | "lane_timeout";

/**
 * A lanes failure with a message fit for the caller. The message never holds
 * a token, receipt, broker address, credential or raw backend error; the
 * backend error, when there is one, stays in `cause` for debugging and is
 * never logged or sent.
 */
export class LaneError extends Error {
  override readonly name = "LaneError";
  readonly [safeMessage] = true as const;

  constructor(
    readonly code: LaneErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
