import { CoreError } from "../errors/core-error.js";

/**
 * The swarm core's reasons. Messages reproduce the specification's exact
 * texts (for example `the hub record lists no member swarms for hive member
 * <id>`), because operators search for them.
 */
export type SwarmReason =
  | "swarm_invalid"
  | "swarm_forbidden"
  | "swarm_conflict"
  | "swarm_unavailable"
  | "swarm_migration_incomplete"
  | "swarm_unscoped";

/** A failure of swarm membership (see CoreError for what its message and cause may hold). */
export class SwarmError extends CoreError<SwarmReason> {
  override readonly name = "SwarmError";
  readonly domain = "swarm" as const;
}
