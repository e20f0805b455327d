/**
 * The hub's texts and refusals. Every swarm failure is a {@link SwarmError}
 * (src/swarm-bus/errors.ts: the member's side raises them too).
 */
import { SwarmError } from "../swarm-bus/index.js";

export { SwarmError, type SwarmReason } from "../swarm-bus/index.js";

/** The specification's texts for the hub, reproduced exactly. */
export const SWARM_TEXTS = Object.freeze({
  memberSwarmsShape: "member_swarms must map member ids to lists of swarm names",
  invalidSwarmName: (reason: string) => `member_swarms contains an invalid swarm name (${reason})`,
  noMemberSwarms: (memberId: string) => `the hub record lists no member swarms for hive member ${memberId}`,
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
