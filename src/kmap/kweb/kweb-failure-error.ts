import { KmapError } from "../errors.js";

/**
 * Why the embedded Kweb failed (as opposed to rejecting a command, which is
 * an ApplyOutcome, or being briefly locked, which is WriterUnavailableError).
 *
 * - `storage_failed`: SQLite failed for a reason other than a held lock.
 * - `unsupported_schema`: the Kweb file was written by a newer Laneway, or is
 *   not a Kweb file at all.
 * - `signing_key_invalid`: the signing key file cannot be read or is not an
 *   Ed25519 private key.
 * - `worker_stopped`: the writer thread died or could not start.
 * - `not_ready`: asked for something only a ready manager has.
 * - `closed`: the manager was closed.
 */
export type KwebFailureReason =
  | "storage_failed"
  | "unsupported_schema"
  | "signing_key_invalid"
  | "worker_stopped"
  | "not_ready"
  | "closed";

/**
 * A failure of the Kweb itself. It is a KmapError with reason `internal` so the
 * server's one error mapping turns it into `internal` without knowing about
 * the Kweb, and the lane's runtime ends on it (a manager failure). The
 * message is written for an operator and never holds SQLite's text or a file
 * path; the original error stays in `cause`.
 */
export class KwebFailureError extends KmapError {
  override readonly name = "KwebFailureError";

  constructor(
    /** What failed, for the log; the caller sees only `internal`. */
    readonly failure: KwebFailureReason,
    message: string,
    options?: { cause?: unknown },
  ) {
    super("internal", message, options);
  }
}
