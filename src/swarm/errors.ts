import { safeMessage } from "../log/safe-message.js";

/**
 * Typed failures of swarm membership. Messages reproduce the specification's
 * exact texts (for example `the hub record lists no member swarms for hive
 * member <id>`), because operators search for them.
 */
export type SwarmErrorCode =
  | "swarm_invalid"
  | "swarm_forbidden"
  | "swarm_conflict"
  | "swarm_unavailable"
  | "swarm_migration_incomplete"
  | "swarm_unscoped";

/** A swarm failure with a message fit for an operator or member. */
export class SwarmError extends Error {
  override readonly name = "SwarmError";
  readonly [safeMessage] = true as const;

  constructor(
    readonly code: SwarmErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
