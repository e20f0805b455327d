import { safeMessage } from "../log/safe-message.js";

/**
 * An error domain: the name of the core that raised a failure, as its
 * binding declares it (src/server/cores), or `server` for what no core owns
 * (health, reflection, a route that does not exist, a body that cannot be
 * decoded before any service is known).
 */
export type ErrorDomain = string;

/**
 * The one base class of every core's typed failures.
 *
 * A core error has two audiences, kept apart:
 * - `message` and `reason` are for the caller: the message is written by
 *   Laneway (fixed templates and identifiers, never a token, receipt,
 *   credential, broker address, path or backend text) and the reason is the
 *   specification's machine-readable code that peers switch on;
 * - `cause` is for the log only: the driver, socket or SQLite error behind
 *   the failure. The logger reduces it to its class name and code; it is
 *   never sent to a caller.
 *
 * The server turns a core error into a Connect error by looking its reason
 * up in its domain's table, which the core's binding declares
 * (src/server/error-mapping.ts holds the mechanism); no other code decides
 * which status a reason gets.
 */
export abstract class CoreError<R extends string = string> extends Error {
  /** The core that raised it; sent to callers in ErrorDetail.domain. */
  abstract readonly domain: ErrorDomain;
  readonly [safeMessage] = true as const;

  constructor(
    /** The specification's reason code, as a binding declares it, e.g. `invalid_input`. */
    readonly reason: R,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * A core could not start. `state_conflict`: what the core finds in its
 * storage is incompatible with its configuration (another generation of a
 * namespace, a stream with another shape) and nothing was rewritten;
 * `unavailable`: its storage cannot be reached. `laneway serve` prints the
 * message as one line and exits 2 for a conflict (the configuration or the
 * state needs a person), 1 when the broker is unavailable (a restart may
 * succeed). The message never holds a raw backend error, an address or a
 * credential.
 */
export class CoreStartupError extends Error {
  override readonly name = "CoreStartupError";
  readonly [safeMessage] = true as const;

  constructor(
    readonly domain: ErrorDomain,
    readonly kind: "state_conflict" | "unavailable",
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
