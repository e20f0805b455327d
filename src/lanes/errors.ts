import { ConfigError } from "../config/errors.js";
import { CoreError } from "../errors/core-error.js";

/**
 * The lanes core's reasons: the specification's JSON code values, which
 * existing peers switch on (`CodeLaneInvalid` … `CodeLaneTimeout`).
 */
export type LaneReason =
  | "lane_invalid"
  | "lane_forbidden"
  | "lane_conflict"
  | "lane_cursor"
  | "lane_stale"
  | "lane_capacity"
  | "lane_canceled"
  | "lane_unavailable"
  | "lane_timeout";

/** A failure of the lanes core (see CoreError for what its message and cause may hold). */
export class LaneError extends CoreError<LaneReason> {
  override readonly name = "LaneError";
  readonly domain = "lanes" as const;
}

/**
 * The lanes configuration file is unusable. The message always starts with
 * `lanes: ` and names the offending field (and its allowed range for a
 * bound), in the form the lanes specification quotes:
 * `lanes: max_pending must be at least 1, got -1`. It is a configuration
 * error: `laneway serve` prints it and exits 2.
 */
export class LanesConfigError extends ConfigError {
  override readonly name = "LanesConfigError";
  /** Path of the offending field (`max_pending`, `lanes[0].owner`), when one is to blame. */
  readonly field: string | undefined;

  constructor(message: string, field?: string) {
    super(message);
    this.field = field;
  }
}
