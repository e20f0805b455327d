import { safeMessage } from "../log/safe-message.js";

/**
 * Typed failures of the Kmap command lane. The specification's public error
 * enum is `InvalidInput`, `Conflict` or `Internal`; `not_found` is added for
 * reads of records and nodes that do not exist.
 */
export type KmapErrorCode = "invalid_input" | "conflict" | "not_found" | "internal";

/**
 * A Kmap failure with a message fit for an administrator. Messages name the
 * field or identifier involved; SQLite's own error text stays in `cause`.
 */
export class KmapError extends Error {
  override readonly name = "KmapError";
  readonly [safeMessage] = true as const;

  constructor(
    readonly code: KmapErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
