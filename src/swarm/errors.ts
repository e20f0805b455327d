import { CoreError } from "../errors/core-error.js";

/**
 * The swarm core's reasons. Messages reproduce the specification's exact
 * texts (for example `the hub record lists no member swarms for hive member
 * <id>`), because operators search for them.
 *
 * - `swarm_invalid`: a request or a signer record that breaks a rule.
 * - `swarm_forbidden`: the hub refuses to mint (field present, member absent).
 * - `swarm_conflict`: state forbids it (the member exists, a `file:` signer
 *   record that is never written).
 * - `swarm_not_found`: no such member.
 * - `swarm_unavailable`: the signer record, the broker or Redis cannot be reached.
 * - `swarm_migration_incomplete`: a scoped resource whose import is pending.
 * - `swarm_unscoped`: a member refuses an unscoped credential for a scoped invite.
 */
export type SwarmReason =
  | "swarm_invalid"
  | "swarm_forbidden"
  | "swarm_conflict"
  | "swarm_not_found"
  | "swarm_unavailable"
  | "swarm_migration_incomplete"
  | "swarm_unscoped";

/** A failure of swarm membership (see CoreError for what its message and cause may hold). */
export class SwarmError extends CoreError<SwarmReason> {
  override readonly name = "SwarmError";
  readonly domain = "swarm" as const;
}

/** The specification's texts, reproduced exactly. */
export const SWARM_TEXTS = Object.freeze({
  memberSwarmsShape: "member_swarms must map member ids to lists of swarm names",
  invalidSwarmName: (reason: string) => `member_swarms contains an invalid swarm name (${reason})`,
  noMemberSwarms: (memberId: string) => `the hub record lists no member swarms for hive member ${memberId}`,
  unscopedOffered: "the hive offered an unscoped bus credential; ask its hub to list this member's swarms",
});

/**
 * Laneway's own texts for refusals the specification does not quote.
 */
export const SWARM_OWN_TEXTS = Object.freeze({
  /** Swarms given to an invite before the member_swarms field exists (the CLI's --swarm). */
  swarmsBeforeScope:
    "swarms were given, but the signer record has no member_swarms field yet, so the invite would be unscoped and the swarms ignored: run laneway hive scope first",
  /** Swarms given to an invite with a file: record, which Laneway never lists members in. */
  swarmsForFileRecord:
    "swarms were given, but the signer record is a file: record, which Laneway never writes: list the member with its swarms in the record's member_swarms file, then invite it without swarms",
  /** A member whose last credential was scoped is never minted an unscoped one. */
  noDowngrade: (memberId: string) =>
    `hive member ${memberId} holds a scoped credential, and the signer record has no member_swarms field now: the hub does not replace it with an unscoped one; restore the member_swarms field (listing ${memberId}), or retire the member and invite it again`,
});

/** A scoped member would be handed an unscoped credential: 403, decided before any side effect. */
export function noDowngradeError(memberId: string): SwarmError {
  return new SwarmError("swarm_forbidden", SWARM_OWN_TEXTS.noDowngrade(memberId));
}

/** The hub record's member_swarms field exists and omits the member: 403, decided before any side effect. */
export function noMemberSwarmsError(memberId: string): SwarmError {
  return new SwarmError("swarm_forbidden", SWARM_TEXTS.noMemberSwarms(memberId));
}
