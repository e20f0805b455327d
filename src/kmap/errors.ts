import { CoreError } from "../errors/core-error.js";

/**
 * The Kmap core's reasons. The specification's public error enum is
 * `InvalidInput`, `Conflict` or `Internal`; `not_found` is added for reads
 * of records and nodes that do not exist.
 */
export type KmapReason = "invalid_input" | "conflict" | "not_found" | "internal";

/**
 * A failure of the Kmap command lane. Messages name the field or identifier
 * involved; SQLite's own error text stays in `cause` (see CoreError).
 */
export class KmapError extends CoreError<KmapReason> {
  override readonly name: string = "KmapError";
  readonly domain = "kmap" as const;
}
